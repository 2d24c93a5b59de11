// What the migrator's progress says in the log (migrate.ts, narrateMigrations): an upgrade tells every migration
// at info, a rewrite before it starts; a fresh database one line at the level asked, the rest at debug unless slow.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { narrateMigrations } from '../../src/services/migration-narration.js';
import type { MigrationProgress } from '../../src/storage/types.js';

function told(progress: MigrationProgress[], options?: Parameters<typeof narrateMigrations>[1]): string[] {
  const lines: string[] = [];
  const narrate = narrateMigrations((level, message) => lines.push(`${level} ${message}`), options);
  for (const step of progress) narrate(step);
  return lines;
}

const upgrade: MigrationProgress[] = [
  { phase: 'plan', pending: [852, 853], fresh: false },
  { phase: 'start', version: 852, name: 'a', rewrites: undefined },
  { phase: 'done', version: 852, name: 'a', seconds: 0.004 },
  { phase: 'start', version: 853, name: 'b', rewrites: 'every stored event' },
  { phase: 'done', version: 853, name: 'b', seconds: 12.34 },
];

test('an upgrade: every migration at info, the rewrite said before it starts, each with its time', () => {
  assert.deepEqual(told(upgrade), [
    'info upgrading the database schema: 2 migrations to apply (852, 853)',
    'info applying migration 852 (a)',
    'info applied migration 852 in 0.00 s',
    'info applying migration 853 (b): it rewrites every stored event, which takes a while on a large database; nothing is served until it is done',
    'info applied migration 853 in 12.3 s',
  ]);
});

test('a fresh database: one line at the level asked, the rest at debug unless a migration was slow', () => {
  const fresh: MigrationProgress[] = [
    { phase: 'plan', pending: [1, 853], fresh: true },
    { phase: 'start', version: 1, name: 'a', rewrites: undefined },
    { phase: 'done', version: 1, name: 'a', seconds: 0.01 },
    { phase: 'start', version: 853, name: 'b', rewrites: 'every stored event' },
    { phase: 'done', version: 853, name: 'b', seconds: 1.5 },
  ];
  assert.deepEqual(told(fresh, { freshLevel: 'debug' }), [
    'debug creating the database schema (2 migrations)',
    'debug applying migration 1 (a)',
    'debug applied migration 1 in 0.01 s',
    'debug applying migration 853 (b)',
    'info applied migration 853 in 1.50 s',
  ]);
  assert.equal(told(fresh)[0], 'info creating the database schema (2 migrations)');
});
