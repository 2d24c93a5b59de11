// Public JSON shapes of users and merges, shared by the identity API, the admin API and the CLI.
import type { UserMergeRecord, UserRecord } from '../storage/types.js';
import type { UserDetails } from '../services/identity-service.js';
import { eventResource } from './events.js';

export function userResource(user: UserRecord) {
  return {
    id: user.id,
    external_id: user.externalId,
    identifiers: user.identifiers,
    traits: user.traits,
    aliases: user.aliases,
    created_at: user.createdAt,
    updated_at: user.updatedAt,
  };
}

export function mergeResource(merge: UserMergeRecord) {
  return {
    from_external_id: merge.fromExternalId,
    from_user_id: merge.fromUserId,
    into_user_id: merge.intoUserId,
    into_external_id: merge.intoExternalId,
    merged_at: merge.mergedAt,
  };
}

export const USER_EVENTS_DEFAULT_LIMIT = 50;
export const USER_EVENTS_MAX_LIMIT = 500;

export function userDetailsResource(details: UserDetails) {
  return {
    ...userResource(details.user),
    identified: details.identified,
    merges: details.merges.map(mergeResource),
    events: details.events.map(eventResource),
  };
}
