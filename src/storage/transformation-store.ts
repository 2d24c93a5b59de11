// Transformation versions and secrets (transformations.md §3), written once for both databases.
import type { ColumnType, Kysely } from 'kysely';
import type { Database } from './database.js';
import type { TransformationStore, TransformationVersion } from './transformation-types.js';
import { versionedDocuments, type DocumentVersion } from './versioned-documents.js';

const asVersion = ({ version, document, createdAt }: DocumentVersion<unknown[]>): TransformationVersion => ({
  version,
  steps: document,
  createdAt,
});

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
  const versions = versionedDocuments<unknown[]>(kysely as Kysely<unknown>, 'transformations', 'steps');
  return {
    put: async (productId, steps, createdAt) => asVersion(await versions.put(productId, steps, createdAt)),
    current: async (productId) => {
      const found = await versions.current(productId);
      return found === undefined ? undefined : asVersion(found);
    },
    currentVersion: (productId) => versions.currentVersion(productId),
    list: async (productId) => (await versions.list(productId)).map(asVersion),
    secret: (productId, make) => secret(db, productId, make),
  };
}
