// Opaque event cursors (events-out §3, §4): what `meta.next_cursor`, the stream's `id:` lines and
// `Last-Event-ID` carry. A cursor encodes one commit position; clients must not build or parse them.
// The "c1." prefix versions the format, so a later encoding can still read today's cursors.

const PREFIX = 'c1.';

export function encodeCursor(position: string): string {
  return PREFIX + Buffer.from(position, 'utf8').toString('base64url');
}

/** The position inside a cursor, or undefined when the text is not a cursor of this format. */
export function decodeCursor(cursor: string): string | undefined {
  if (!cursor.startsWith(PREFIX) || cursor.length > 200) return undefined;
  const body = cursor.slice(PREFIX.length);
  if (!/^[A-Za-z0-9_-]+$/.test(body)) return undefined;
  const position = Buffer.from(body, 'base64url').toString('utf8');
  return encodeCursor(position) === cursor ? position : undefined;
}
