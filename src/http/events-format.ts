// Response headers of the event endpoints; the record shape lives in src/resources/events.ts.
export { eventResource, type EventResource } from '../resources/events.js';

/** Headers on every response to legacy flat input (contract §4, §5). */
export const DEPRECATION_HEADERS = { deprecation: 'true', sunset: '2026-09-01' } as const;
