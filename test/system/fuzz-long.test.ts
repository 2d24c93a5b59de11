// The HTTP fuzz suite at length, in the system tier: 8,000 seeded cases per backend (npm test runs 600 of a
// fresh seed to stay inside its 90 s; clarifications §6). The same test file, run with more cases in a
// process of its own. INLET_FUZZ_CASES / INLET_FUZZ_SEED still override; the 100,000-case run is
// `npm run fuzz -- --cases 100000`.
process.env.INLET_FUZZ_CASES ??= '8000';
await import('../fuzz/http-fuzz.test.js');
