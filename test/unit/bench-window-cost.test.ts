// The sustained run's cost of a window (bench/sustained.ts), which tells a window the machine slowed from one the
// table slowed: the server's CPU an event, and the machine's idle and stolen shares of its cores over the window.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { costBetween, type Mark } from '../../bench/sustained.js';

const mark = (answers: number, server: number | undefined, busy: number, steal: number, all: number): Mark => ({
  answers,
  server,
  machine: { busy, steal, all },
});

test("a window's server CPU is per event: its answers times the events each carries", () => {
  // 2,500 answers of 100 events; the server used 9 s of CPU: 36 µs an event.
  const cost = costBetween(mark(2_500, 100, 0, 0, 0), mark(5_000, 109, 0, 0, 0), 100);
  assert.ok(Math.abs(cost.serverMicrosPerEvent! - 36) < 1e-9);
});

test('the idle and stolen shares are of all the cores over the window', () => {
  // 20 s of both cores (40 core-seconds, `all`); 30 busy, 2 of them stolen.
  const cost = costBetween(mark(0, 0, 100, 5, 400), mark(10, 1, 130, 7, 440), 100);
  assert.ok(Math.abs(cost.idleShare - 0.25) < 1e-9);
  assert.ok(Math.abs(cost.stealShare - 0.05) < 1e-9);
});

test('a server whose CPU could not be read gives no figure, not a wrong one', () => {
  assert.equal(costBetween(mark(0, undefined, 0, 0, 10), mark(10, 5, 5, 0, 20), 100).serverMicrosPerEvent, undefined);
  assert.equal(costBetween(mark(0, 1, 0, 0, 10), mark(10, undefined, 5, 0, 20), 100).serverMicrosPerEvent, undefined);
  // And a window without answers has no CPU an event.
  assert.equal(costBetween(mark(10, 1, 0, 0, 10), mark(10, 2, 5, 0, 20), 100).serverMicrosPerEvent, undefined);
});

test('a window without clock ticks (the same reading twice) has no shares rather than a division by zero', () => {
  const cost = costBetween(mark(0, 1, 5, 1, 10), mark(10, 2, 5, 1, 10), 100);
  assert.equal(cost.idleShare, 0);
  assert.equal(cost.stealShare, 0);
});
