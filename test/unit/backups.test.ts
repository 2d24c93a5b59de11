// Backups (issue 36): the settings' syntax and errors, and the names, rotation and retry timing of scheduled backups.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config.js';
import {
  backupFileName,
  backupsBeyond,
  backupTimeOf,
  firstBackupDelay,
  isScheduledTemporary,
  parseInterval,
  retryDelay,
  temporaryName,
} from '../../src/domain/backups.js';

const MIN = 60_000;
const HOUR = 3_600_000;

describe('parseInterval', () => {
  const valid: Array<[string | undefined, number | undefined]> = [
    [undefined, undefined],
    ['', undefined],
    [' off ', undefined],
    ['0', undefined],
    ['6h', 6 * HOUR],
    ['30m', 30 * MIN],
    ['90s', 90_000],
    ['1d', 24 * HOUR],
    ['1h30m', 90 * MIN],
    ['2H', 2 * HOUR],
  ];
  for (const [text, ms] of valid) it(`${JSON.stringify(text)} → ${ms}`, () => assert.equal(parseInterval(text), ms));
  for (const text of ['6', 'h', '6 h', '-1h', '1.5h', '6hours', '1w', 'on', '6h-']) {
    it(`${JSON.stringify(text)} is refused`, () => assert.throws(() => parseInterval(text), /must be a duration/));
  }
});

describe('the backup settings (INLET_BACKUP_DIR, INLET_BACKUP_INTERVAL, INLET_BACKUP_KEEP)', () => {
  it('are off by default', () => assert.equal(loadConfig({}).backupSchedule, undefined));

  it('give a schedule with an absolute directory; KEEP defaults to 7', () => {
    const { backupSchedule } = loadConfig({ INLET_BACKUP_DIR: 'backups', INLET_BACKUP_INTERVAL: '6h' });
    assert.deepEqual(backupSchedule, { dir: `${process.cwd()}/backups`, intervalMs: 6 * HOUR, keep: 7 });
    const kept = loadConfig({ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: '30m', INLET_BACKUP_KEEP: '3' });
    assert.deepEqual(kept.backupSchedule, { dir: '/b', intervalMs: 30 * MIN, keep: 3 });
  });

  const refused: Array<[Record<string, string>, RegExp]> = [
    [{ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: 'every day' }, /^INLET_BACKUP_INTERVAL must be a duration/],
    [{ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: '500ms' }, /^INLET_BACKUP_INTERVAL must be a duration/],
    [{ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: '400d' }, /^INLET_BACKUP_INTERVAL must be between 1s and 366d/],
    [{ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: '6h', INLET_BACKUP_KEEP: '0' }, /^INLET_BACKUP_KEEP must be/],
    [{ INLET_BACKUP_DIR: '/b', INLET_BACKUP_INTERVAL: '6h', INLET_BACKUP_KEEP: 'all' }, /^INLET_BACKUP_KEEP must be/],
    [{ INLET_BACKUP_INTERVAL: '6h' }, /^INLET_BACKUP_INTERVAL is set but INLET_BACKUP_DIR is not/],
    [{ INLET_BACKUP_DIR: '/b' }, /^INLET_BACKUP_DIR is set but INLET_BACKUP_INTERVAL is not/],
  ];
  for (const [env, message] of refused) {
    it(`${JSON.stringify(env)} is refused, naming the setting`, () => {
      assert.throws(
        () => loadConfig(env),
        (error: unknown) => error instanceof ConfigError && message.test(error.message),
      );
    });
  }
});

describe('scheduled backups: names, rotation, timing', () => {
  it('names sort by time and carry it back', () => {
    const at = new Date('2026-11-28T08:15:00.123Z');
    assert.equal(backupFileName(at), 'inlet-20261128T081500.123Z.db');
    assert.equal(backupTimeOf(backupFileName(at)), at.getTime());
    const times = ['2026-11-28T09:00:00.000Z', '2026-11-28T10:00:00.000Z', '2027-01-01T00:00:00.000Z'];
    const names = times.map((t) => backupFileName(new Date(t)));
    assert.deepEqual([...names].reverse().sort(), names);
    for (const other of ['inlet.db', 'inlet-2026.db', 'notes.txt', 'inlet-20261128T081500.123Z.db-journal']) {
      assert.equal(backupTimeOf(other), undefined, other);
    }
  });

  it('rotation removes the oldest scheduled backups beyond the count, and nothing else', () => {
    const names = [
      'inlet-20261128T090000.000Z.db',
      'manual.db',
      'inlet-20261126T090000.000Z.db',
      'inlet-20261127T090000.000Z.db',
      'inlet-20261128T150000.000Z.db',
    ];
    assert.deepEqual(backupsBeyond(names, 2), ['inlet-20261126T090000.000Z.db', 'inlet-20261127T090000.000Z.db']);
    assert.deepEqual(backupsBeyond(names, 7), []);
  });

  it('temporary files of scheduled backups are told apart from a manual backup under way', () => {
    assert.ok(isScheduledTemporary(temporaryName('inlet-20261128T090000.000Z.db', '0a1b2c3d')));
    assert.equal(isScheduledTemporary(temporaryName('manual.db', '0a1b2c3d')), false);
    assert.equal(isScheduledTemporary('inlet-20261128T090000.000Z.db'), false);
  });

  it('a failure is tried again after 1, 2, 4 … minutes, never later than the interval', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 100].map((n) => retryDelay(6 * HOUR, n) / MIN),
      [1, 2, 4, 8, 16, 32, 64, 128, 256, 360],
    );
    assert.equal(retryDelay(30_000, 1), 30_000);
  });

  it('the first backup after a start is due an interval after the newest kept, at once if none or overdue', () => {
    const now = Date.parse('2026-11-28T12:00:00Z');
    assert.equal(firstBackupDelay(undefined, now, 6 * HOUR), 0);
    assert.equal(firstBackupDelay(now - 2 * HOUR, now, 6 * HOUR), 4 * HOUR);
    assert.equal(firstBackupDelay(now - 7 * HOUR, now, 6 * HOUR), 0);
    // A clock set back: never more than one interval.
    assert.equal(firstBackupDelay(now + 10 * HOUR, now, 6 * HOUR), 6 * HOUR);
  });
});
