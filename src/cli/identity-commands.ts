// CLI commands for identity (contract §6): look a user up by any of its external ids.
import { userDetailsResource, USER_EVENTS_DEFAULT_LIMIT, USER_EVENTS_MAX_LIMIT } from '../resources/identity.js';
import { requireOption, table, UsageError, type Command } from './command.js';

export const identityCommands: Command[] = [
  {
    path: ['users', 'show'],
    usage: 'inlet users show --product <id> <external_id> [--events <n>] [--json]',
    summary:
      'Show the user an external id (canonical or merged) resolves to: identifiers, traits, aliases, merges, recent events',
    options: { product: { type: 'string' }, events: { type: 'string' } },
    async run({ services, args, values, io, json }) {
      const productId = requireOption(values, 'product');
      const externalId = args[0];
      if (externalId === undefined || args.length > 1)
        throw new UsageError('exactly one external id is required (quote it if it contains spaces)');
      const eventsOption = values.events;
      let limit = USER_EVENTS_DEFAULT_LIMIT;
      if (typeof eventsOption === 'string') {
        if (!/^\d+$/.test(eventsOption) || Number(eventsOption) > USER_EVENTS_MAX_LIMIT)
          throw new UsageError(`--events must be a whole number from 0 to ${USER_EVENTS_MAX_LIMIT}`);
        limit = Number(eventsOption);
      }
      await services.keys.requireProduct(productId);
      const user = userDetailsResource(await services.identity.getUser(productId, externalId, limit));
      if (json) {
        io.out(JSON.stringify({ data: user }));
        return 0;
      }
      io.out(
        `user ${user.id}  external_id ${user.external_id}${externalId === user.external_id ? '' : `  (resolved from alias "${externalId}")`}`,
      );
      io.out(`created ${user.created_at}  updated ${user.updated_at}`);
      io.out(`aliases      ${user.aliases.length === 0 ? '-' : user.aliases.join(', ')}`);
      io.out(
        `identifiers  ${
          Object.keys(user.identifiers).length === 0
            ? '-'
            : Object.entries(user.identifiers)
                .map(([k, v]) => `${k}=${v}`)
                .join(', ')
        }`,
      );
      io.out(`traits       ${JSON.stringify(user.traits)}`);
      io.out('');
      io.out(
        user.merges.length === 0
          ? 'merges: none'
          : `merges:\n${table(user.merges, ['merged_at', 'from_external_id', 'from_user_id', 'into_external_id', 'into_user_id'])}`,
      );
      io.out('');
      io.out(
        user.events.length === 0
          ? 'events: none'
          : `events (most recent ${user.events.length}):\n${table(
              user.events.map((e) => ({
                occurred_at: e.occurred_at,
                name: e.canonical_name,
                subject_id: e.subject_id,
                uuid: e.uuid,
              })),
              ['occurred_at', 'name', 'subject_id', 'uuid'],
            )}`,
      );
      return 0;
    },
  },
];
