// The sustained run's windows (bench/sustained.ts), which tell a window the machine slowed from one the table
// slowed: each window's rate, the server's (and PostgreSQL's) CPU an event, and the machine's idle and stolen shares
// of its cores.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { windowBetween, type Mark } from '../../bench/sustained.js';

const mark = (
  answers: number,
  at: number,
  server: number | undefined,
  machine: { busy: number; steal: number; all: number } = { busy: 0, steal: 0, all: 0 },
  database?: number,
): Mark => ({ answers, at, server, database, machine });

const close = (actual: number | undefined, expected: number) =>
  assert.ok(actual !== undefined && Math.abs(actual - expected) < 1e-9, `${actual} ≠ ${expected}`);

test("a window's rate and server CPU are per event: its answers times the events each carries", () => {
  // 2,500 answers of 100 events in 10 s, the server using 9 s of CPU: 25,000 events/s, 36 µs an event.
  const window = windowBetween(mark(2_500, 5_000, 100), mark(5_000, 15_000, 109), 100);
  close(window.eventsPerSecond, 25_000);
  close(window.serverMicrosPerEvent, 36);
});

test("PostgreSQL's CPU is per event too, apart from the server's, and absent on SQLite", () => {
  // 1,000 answers of 100 events; PostgreSQL's processes used 5.5 s: 55 µs an event.
  const window = windowBetween(mark(0, 0, 10, undefined, 20), mark(1_000, 4_000, 12, undefined, 25.5), 100);
  close(window.databaseMicrosPerEvent, 55);
  close(window.serverMicrosPerEvent, 20);
  assert.equal(windowBetween(mark(0, 0, 1), mark(1_000, 4_000, 2), 100).databaseMicrosPerEvent, undefined);
});

test('the idle and stolen shares are of all the cores over the window', () => {
  // 20 s of both cores (40 core-seconds of `all`); 30 busy, 2 of them stolen.
  const window = windowBetween(
    mark(0, 0, 0, { busy: 100, steal: 5, all: 400 }),
    mark(10, 20_000, 1, { busy: 130, steal: 7, all: 440 }),
    100,
  );
  close(window.idleShare, 0.25);
  close(window.stealShare, 0.05);
});

test('a server whose CPU could not be read, or a window without answers, gives no CPU figure, not a wrong one', () => {
  assert.equal(windowBetween(mark(0, 0, undefined), mark(10, 1_000, 5), 100).serverMicrosPerEvent, undefined);
  assert.equal(windowBetween(mark(0, 0, 1), mark(10, 1_000, undefined), 100).serverMicrosPerEvent, undefined);
  assert.equal(windowBetween(mark(10, 0, 1), mark(10, 1_000, 2), 100).serverMicrosPerEvent, undefined);
});

test('a window without time or clock ticks (the same reading twice) divides nothing by zero', () => {
  const same = mark(10, 1_000, 2, { busy: 5, steal: 1, all: 10 });
  const window = windowBetween(mark(0, 1_000, 1, { busy: 5, steal: 1, all: 10 }), same, 100);
  assert.equal(window.eventsPerSecond, 0);
  assert.equal(window.idleShare, 0);
  assert.equal(window.stealShare, 0);
});
