// The identity model test at length, in the system tier: 300 random identify/alias sequences per backend
// (npm test runs 25 to stay inside its 90 s; clarifications §6). The same test file, run with more
// sequences in a process of its own; INLET_MODEL_RUNS still overrides.
process.env.INLET_MODEL_RUNS ??= '300';
await import('../identity-model.test.js');
