// A stored time's ISO text (storage/database.ts toIso): SQLite keeps event times as milliseconds, and the mappers
// make their text by hand, keeping the texts of the days and of the two times used last. Whatever the order the
// times come in (repeated, alternating, new), each text is the one Date's toISOString gives.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { toIso } from '../../src/storage/database.js';

const millis = fc.integer({ min: -62_167_219_200_000, max: 253_402_300_799_999 });

describe('stored times', () => {
  it('read back as toISOString gives them, in any order and repetition', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            millis,
            fc.constantFrom(0, 1_795_916_755_767, 1_772_366_400_000, -62_167_219_200_001, 253_402_300_800_000),
          ),
          { maxLength: 50 },
        ),
        (times) => {
          for (const ms of [...times, ...times.toReversed(), ...times.flatMap((t) => [t, t, times[0]!])])
            assert.equal(toIso(ms), new Date(ms).toISOString());
        },
      ),
    );
  });
});
