// Entry of the `inlet` executable.
const argv = process.argv.slice(2);
if (argv[0] === 'serve') {
  await import('../main.js');
} else {
  const { runCli } = await import('./main.js');
  process.exitCode = await runCli(argv);
}
