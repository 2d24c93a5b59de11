// Keys travel in some URLs (Segment's `/v1/projects/{key}/settings`, `?writeKey=`): they never reach a
// log line or a metric label (clarifications §21).
const KEY_IN_TEXT = /inlet_(ev|rp|pk)_[0-9A-Za-z]+/g;
const WRITE_KEY_PARAM = /([?&]writeKey=)[^&#]*/gi;
const SETTINGS_PATH = /(\/v1\/projects\/)[^/?#]+/g;
/** What any of the three above needs in the URL: most URLs (every ingest route's) have none, and skip them. */
const MAY_HOLD_KEY = /inlet_|writekey=|\/v1\/projects\//i;

export function redactUrl(url: string): string {
  if (!MAY_HOLD_KEY.test(url)) return url;
  return url
    .replace(WRITE_KEY_PARAM, '$1[redacted]')
    .replace(SETTINGS_PATH, '$1[redacted]')
    .replace(KEY_IN_TEXT, 'inlet_$1_[redacted]');
}
