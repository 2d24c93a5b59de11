// The layering rules of eslint.config.js (src/README.md, "What may import what") refuse what they
// promise to refuse, and let through what each layer needs: one-line modules linted as if they were
// files of each folder, through ESLint's API with the project's own configuration.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));
const eslint = new ESLint({ cwd: root });
const RULE = '@typescript-eslint/no-restricted-imports';

/** The layering errors ESLint reports for `code` as the file `path` (relative to the repository). */
async function layeringErrors(path: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(`${code}\nexport {};\n`, { filePath: `${root}${path}` });
  return result!.messages.filter((m) => m.ruleId === RULE).map((m) => m.message);
}

const refused: Array<[string, string, RegExp]> = [
  ['src/domain/example.ts', "import type { EventRecord } from '../storage/types.js';", /src\/domain is pure/],
  ['src/domain/example.ts', "import { AppError } from '../http/auth.js';", /src\/domain is pure/],
  ['src/services/example.ts', "import { openStorage } from '../storage/connect.js';", /only the port/],
  ['src/services/example.ts', "import type { OpenedStorage } from '../storage/connect.js';", /only the port/],
  [
    'src/services/example.ts',
    "import { sqliteEventWriter } from '../storage/sqlite/event-writer.js';",
    /only the port/,
  ],
  [
    'src/services/example.ts',
    "export { postgresSettings } from '../storage/postgres/connection-url.js';",
    /only the port/,
  ],
  ['src/services/example.ts', "import { eventResource } from '../resources/events.js';", /public JSON/],
  ['src/services/example.ts', "import type { Config } from '../config.js';", /composition root/],
  ['src/services/example.ts', "import { buildApp } from '../http/app.js';", /Nothing imports src\/http/],
  ['src/services/example.ts', "import { createTrafficScheduler } from '../sync/scheduler.js';", /src\/sync/],
  // A service's own folder (services/destinations/, services/erasure/) is under the same rules.
  ['src/services/destinations/example.ts', "import { openStorage } from '../../storage/connect.js';", /only the port/],
  [
    'src/services/destinations/example.ts',
    "import { buildApp } from '../../http/app.js';",
    /Nothing imports src\/http/,
  ],
  ['src/services/erasure/example.ts', "import type { Config } from '../../config.js';", /composition root/],
  ['src/services/erasure/example.ts', "import { createServices } from '../../services.js';", /composition root/],
  ['src/storage/example.ts', "import { createMetrics } from '../services/metrics.js';", /below the services/],
  ['src/storage/postgres/example.ts', "import { AppError } from '../../http/auth.js';", /Nothing imports src\/http/],
  ['src/http/routes/example.ts', "import { openStorage } from '../../storage/connect.js';", /only the port/],
  [
    'src/http/routes/example.ts',
    "import { isPostgresUnavailable } from '../../storage/postgres/errors.js';",
    /only the port/,
  ],
  ['src/http/example.ts', "import { createServices } from '../services.js';", /only the Services and Config types/],
  [
    'src/http/admin/example.ts',
    "import { createTrafficSyncService } from '../../sync/sync-service.js';",
    /services.traffic/,
  ],
  [
    'src/resources/example.ts',
    "import { createIdentityService } from '../services/identity-service.js';",
    /types services return/,
  ],
  ['src/sync/example.ts', "import { eventResource } from '../resources/events.js';", /public JSON/],
  ['src/cli/example.ts', "import { buildApp } from '../http/app.js';", /Nothing imports src\/http/],
  ['src/cli/example.ts', "import { trafficStore } from '../storage/traffic-store.js';", /only the port/],
  [
    'src/config.ts',
    "import { postgresSettings } from './storage/postgres/connection-url.js';",
    /through storage\/connect.ts/,
  ],
  ['src/services.ts', "import { buildApp } from './http/app.js';", /Nothing imports src\/http/],
  ['src/services/event-export.ts', "import { eventResource } from '../resources/events.js';", /public JSON/],
  ['src/services/event-export.ts', "import { exportText } from '../resources/event-export.js';", /public JSON/],
];

const allowed: Array<[string, string]> = [
  ['src/domain/example.ts', "import { AppError } from './errors.js';"],
  ['src/domain/example.ts', "import { Type } from '@sinclair/typebox';"],
  ['src/services/example.ts', "import type { Storage } from '../storage/types.js';"],
  ['src/services/example.ts', "import { createKeyService } from './key-service.js';"],
  ['src/services/example.ts', "import { AppError } from '../domain/errors.js';"],
  ['src/services/destinations/example.ts', "import type { DestinationStore } from '../../storage/types.js';"],
  ['src/services/destinations/example.ts', "import { outboundGuard } from '../outbound-guard.js';"],
  ['src/services/erasure/example.ts', "import { gentleBatches } from '../gentle-batches.js';"],
  ['src/storage/sqlite/example.ts', "import type { Storage } from '../types.js';"],
  ['src/storage/example.ts', "import { AppError } from '../domain/errors.js';"],
  ['src/http/routes/example.ts', "import type { Services } from '../../services.js';"],
  ['src/http/routes/example.ts', "import type { EventRecord } from '../../storage/types.js';"],
  ['src/http/routes/example.ts', "import { EVENTS_MAX_LIMIT } from '../../services/event-read-service.js';"],
  ['src/http/routes/example.ts', "import { eventResource } from '../../resources/events.js';"],
  ['src/resources/example.ts', "import type { UserDetails } from '../services/identity-service.js';"],
  ['src/sync/example.ts', "import type { Storage } from '../storage/types.js';"],
  ['src/cli/example.ts', "import { createServices } from '../services.js';"],
  ['src/main.ts', "import { buildApp } from './http/app.js';"],
  ['src/services.ts', "import { openStorage } from './storage/connect.js';"],
  ['src/config.ts', "import { checkDatabaseUrl } from './storage/connect.js';"],
  ['test/example.test.ts', "import { buildApp } from '../src/http/app.js';"],
  ['test/example.test.ts', "import { sqliteEventWriter } from '../src/storage/sqlite/event-writer.js';"],
];

describe('layering rules (eslint.config.js)', () => {
  for (const [path, code, message] of refused) {
    it(`refuses in ${path}: ${code}`, async () => {
      const errors = await layeringErrors(path, code);
      assert.equal(errors.length, 1, `expected one layering error, got ${JSON.stringify(errors)}`);
      assert.match(errors[0]!, message);
    });
  }
  for (const [path, code] of allowed) {
    it(`allows in ${path}: ${code}`, async () => {
      assert.deepEqual(await layeringErrors(path, code), []);
    });
  }
});
