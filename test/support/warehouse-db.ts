// A PostgreSQL database of its own as a warehouse (clarifications §34): created on the local server with a
// unique name, never the database the service stores in, and dropped after the test.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { postgresUrl } from '../helpers.js';

export interface WarehouseDb {
  name: string;
  /** The warehouse's URL, as a destination is given it. */
  url: string;
  query<T extends pg.QueryResultRow = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

function serverUrl(database: string): string {
  const url = new URL(postgresUrl);
  url.pathname = `/${database}`;
  url.search = '';
  return url.toString();
}

export async function createWarehouseDb(): Promise<WarehouseDb> {
  const name = `inlet_wh_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl('postgres') });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = serverUrl(name);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => {});
  return {
    name,
    url,
    async query<T extends pg.QueryResultRow>(text: string, values?: unknown[]) {
      return (await pool.query<T>(text, values)).rows;
    },
    async drop() {
      await pool.end();
      const client = new pg.Client({ connectionString: serverUrl('postgres') });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}
