// Destinations (events-out §6): the opaque destination cursor and stable message ids.

/** Where a destination is: after these positions (null: from the beginning of that log). */
export interface DestinationCursorValue {
  event: string | null;
  identity: string | null;
}

/** The opaque destination cursor: `d1.` + base64url of [event position, identity position]. */
export function encodeDestinationCursor(cursor: DestinationCursorValue): string {
  return 'd1.' + Buffer.from(JSON.stringify([cursor.event, cursor.identity]), 'utf8').toString('base64url');
}

export function decodeDestinationCursor(text: string): DestinationCursorValue | undefined {
  if (!text.startsWith('d1.') || text.length > 300) return undefined;
  try {
    const value = JSON.parse(Buffer.from(text.slice(3), 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(value) || value.length !== 2 || !value.every((v) => v === null || typeof v === 'string'))
      return undefined;
    return { event: value[0] as string | null, identity: value[1] as string | null };
  } catch {
    return undefined;
  }
}

/** The stable id of an event's `event.created` message: `evt_` + its uuid without dashes (clarifications §26). */
export function messageIdOfEvent(uuid: string): string {
  return `evt_${uuid.replace(/-/g, '')}`;
}
