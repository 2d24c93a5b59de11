// The public shape of a recorded rejection, shared by the admin API and the CLI's --json output.
import type { RejectionRecord } from '../storage/types.js';

export function rejectionResource(r: RejectionRecord) {
  let item: unknown;
  try {
    item = JSON.parse(r.item);
  } catch {
    item = r.item; // truncated at 32 KiB: the text as kept
  }
  return {
    id: r.id,
    received_at: r.receivedAt,
    key_id: r.keyId,
    route: r.route,
    index: r.index,
    message_id: r.messageId,
    code: r.code,
    detail: r.detail,
    severity: r.severity,
    item,
  };
}
