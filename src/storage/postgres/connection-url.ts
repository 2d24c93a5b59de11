// Which PostgreSQL schema an INLET_DATABASE_URL selects. Two spellings are understood:
//   postgres://user@host/db?schema=inlet                         Inlet's own parameter (created if missing)
//   postgres://user@host/db?options=-c%20search_path%3Dinlet     libpq's, passed to the server as is
// `schema` is taken out of the URL before it reaches the driver. Several deployments (or a test run
// per process) can then share one database, each in its own schema.

/** Unquoted PostgreSQL identifiers only: the name is written into SQL and into `search_path`. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export interface PostgresTarget {
  /** The URL for the driver, without Inlet's `schema` parameter. */
  connectionString: string;
  /** The schema to create and use, from `?schema=` or the `postgresSchema` option. */
  schema: string | undefined;
}

export function postgresTarget(url: string, schemaOption?: string): PostgresTarget {
  const queryStart = url.indexOf('?');
  let connectionString = url;
  let fromUrl: string | undefined;
  if (queryStart >= 0) {
    const params = new URLSearchParams(url.slice(queryStart + 1));
    const values = params.getAll('schema');
    if (values.length > 1) throw new Error('INLET_DATABASE_URL names more than one schema');
    fromUrl = values[0];
    params.delete('schema');
    const rest = params.toString();
    connectionString = url.slice(0, queryStart) + (rest === '' ? '' : `?${rest}`);
  }
  if (fromUrl !== undefined && schemaOption !== undefined && fromUrl !== schemaOption) {
    throw new Error(`two PostgreSQL schemas requested: "${fromUrl}" in the URL and "${schemaOption}"`);
  }
  const schema = schemaOption ?? fromUrl;
  if (schema !== undefined && !SCHEMA_NAME.test(schema)) {
    throw new Error(`invalid PostgreSQL schema name "${schema}" (lower-case letters, digits and _; not starting with a digit)`);
  }
  return { connectionString, schema };
}
