// A document kept in numbered versions per product, the newest in force: tracking plans (governance.md §2) and
// transformations (transformations.md §3). Each table has (product_id, version) as its primary key, the document
// as JSON in one column, and created_at.
import { sql, type ColumnType, type Kysely } from 'kysely';
import { toIso } from './database.js';

export interface DocumentVersion<T> {
  version: number;
  document: T;
  createdAt: string;
}

type Row = {
  product_id: string;
  version: number;
  document: ColumnType<unknown, string, string>;
  created_at: ColumnType<Date | string, string, string>;
};

/** The versions of `column` in `table`; the rows' JSON read back whether the driver parsed it or not. */
export function versionedDocuments<T>(kysely: Kysely<unknown>, table: string, column: string) {
  // One shape for every such table: the document column is renamed to `document` in each statement.
  const db = kysely as unknown as Kysely<Record<string, Row>>;
  const documentColumn = sql.ref<unknown>(column).as('document');
  const fromRow = (row: { version: number; document: unknown; created_at: Date | string }): DocumentVersion<T> => ({
    version: Number(row.version),
    document: (typeof row.document === 'string' ? JSON.parse(row.document) : row.document) as T,
    createdAt: toIso(row.created_at),
  });
  const newestFirst = (productId: string) =>
    db
      .selectFrom(table)
      .select(['version', documentColumn, 'created_at'])
      .where('product_id', '=', productId)
      .orderBy('version', 'desc');

  return {
    /** Stores the next version. Two instances storing at once: the primary key refuses one, which takes the next number. */
    async put(productId: string, document: T, createdAt: string): Promise<DocumentVersion<T>> {
      for (let attempt = 0; ; attempt++) {
        const top = await db
          .selectFrom(table)
          .select((eb) => eb.fn.max('version').as('v'))
          .where('product_id', '=', productId)
          .executeTakeFirst();
        const version = Number(top?.v ?? 0) + 1;
        try {
          await db
            .insertInto(table)
            .values({
              product_id: productId,
              version,
              [column]: JSON.stringify(document),
              created_at: createdAt,
            } as never)
            .execute();
          return { version, document, createdAt };
        } catch (error) {
          const code = (error as { code?: string }).code;
          if (attempt < 5 && (code === '23505' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY')) continue;
          throw error;
        }
      }
    },
    async current(productId: string): Promise<DocumentVersion<T> | undefined> {
      const row = await newestFirst(productId).limit(1).executeTakeFirst();
      return row === undefined ? undefined : fromRow(row);
    },
    /** The number in force (0: none), without reading the document: what the services' caches poll. */
    async currentVersion(productId: string): Promise<number> {
      const row = await db
        .selectFrom(table)
        .select('version')
        .where('product_id', '=', productId)
        .orderBy('version', 'desc')
        .limit(1)
        .executeTakeFirst();
      return row === undefined ? 0 : Number(row.version);
    },
    async list(productId: string): Promise<Array<DocumentVersion<T>>> {
      return (await newestFirst(productId).execute()).map(fromRow);
    },
  };
}
