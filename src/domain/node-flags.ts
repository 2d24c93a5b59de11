// Reading a V8 or Node.js flag the way the process was started with it: from NODE_OPTIONS and the command line.

/**
 * The value of the flag `name` (given with dashes, as `max-semi-space-size`), or undefined when neither
 * `nodeOptions` nor `argv` sets it. Node reads NODE_OPTIONS first and the command line after, and V8 takes the
 * last setting, so the last one here wins. V8 accepts `_` for `-` in a name and its value after `=` or as the
 * next argument; a flag given with neither reads as ''.
 */
export function nodeFlagValue(name: string, argv: readonly string[], nodeOptions = ''): string | undefined {
  const pattern = new RegExp(`^--${name.replace(/-/g, '[-_]')}(?:=(.*))?$`);
  const args = [...nodeOptions.split(/\s+/).filter((arg) => arg !== ''), ...argv];
  let value: string | undefined;
  args.forEach((arg, i) => {
    const match = pattern.exec(arg);
    if (match === null) return;
    const next = args[i + 1];
    value = match[1] ?? (next !== undefined && !next.startsWith('--') ? next : '');
  });
  return value;
}
