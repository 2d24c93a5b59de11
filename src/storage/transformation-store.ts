// Transformation versions and secrets (transformations.md §3), written once for both databases.
import type { ColumnType, Kysely } from 'kysely';
import { toIso, type Database } from './database.js';
import type { TransformationStore, TransformationVersion } from './transformation-types.js';

interface TransformationTables {
  transformations: {
    product_id: string;
    version: number;
    steps: ColumnType<string | unknown[], string, string>;
    created_at: ColumnType<Date | string, string, string>;
  };
  transformation_secrets: { product_id: string; secret: string };
}

type Db = Kysely<Database & TransformationTables>;

function fromRow(row: { version: number; steps: unknown; created_at: Date | string }): TransformationVersion {
  const steps = typeof row.steps === 'string' ? (JSON.parse(row.steps) as unknown[]) : (row.steps as unknown[]);
  return { version: Number(row.version), steps, createdAt: toIso(row.created_at) };
}

function isKeyConflict(error: unknown): boolean {
  const code = (error as { code?: string }).code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

async function put(db: Db, productId: string, steps: unknown[], createdAt: string): Promise<TransformationVersion> {
  // Two instances storing a version at once: the primary key refuses the second, which retries with the next number.
  for (let attempt = 0; ; attempt++) {
    const top = await db
      .selectFrom('transformations')
      .select((eb) => eb.fn.max('version').as('v'))
      .where('product_id', '=', productId)
      .executeTakeFirst();
    const version = Number(top?.v ?? 0) + 1;
    try {
      await db
        .insertInto('transformations')
        .values({ product_id: productId, version, steps: JSON.stringify(steps), created_at: createdAt })
        .execute();
      return { version, steps, createdAt };
    } catch (error) {
      if (attempt < 5 && isKeyConflict(error)) continue;
      throw error;
    }
  }
}

async function current(db: Db, productId: string): Promise<TransformationVersion | undefined> {
  const row = await db
    .selectFrom('transformations')
    .select(['version', 'steps', 'created_at'])
    .where('product_id', '=', productId)
    .orderBy('version', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row === undefined ? undefined : fromRow(row);
}

async function secret(db: Db, productId: string, make: () => string): Promise<string> {
  const read = () =>
    db.selectFrom('transformation_secrets').select('secret').where('product_id', '=', productId).executeTakeFirst();
  const found = await read();
  if (found !== undefined) return found.secret;
  // Two instances making it at once: the first insert wins and both read the same secret.
  await db
    .insertInto('transformation_secrets')
    .values({ product_id: productId, secret: make() })
    .onConflict((oc) => oc.column('product_id').doNothing())
    .execute();
  return (await read())!.secret;
}

export function transformationStore(kysely: Kysely<Database>): TransformationStore {
  const db = kysely as unknown as Db;
  return {
    put: (productId, steps, createdAt) => put(db, productId, steps, createdAt),
    current: (productId) => current(db, productId),
    async currentVersion(productId) {
      const row = await db
        .selectFrom('transformations')
        .select('version')
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? 0 : Number(row.version);
    },
    async list(productId) {
      const rows = await db
        .selectFrom('transformations')
        .select(['version', 'steps', 'created_at'])
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .execute();
      return rows.map(fromRow);
    },
    secret: (productId, make) => secret(db, productId, make),
  };
}
