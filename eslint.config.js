import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// ---------------------------------------------------------------------------------------------
// Layering (src/README.md, "What may import what"), checked on every import and re-export of our own
// modules. Our imports are relative ('../storage/connect.js'), so each rule is a regular expression on
// the specifier: one or more './' or '../', then the folder or root module it reaches. `types` lets
// `import type` through (types may cross where values may not). Dynamic import() is not checked; src
// uses it only for libraries and in the CLI's bin entry point.
const ours = (path) => `^(?:\\.\\.?/)+${path}`;

const layer = {
  http: {
    regex: ours('http/'),
    message:
      'Nothing imports src/http but the composition root (src/main.ts) and tests: put what both sides need in services, domain or resources.',
  },
  cli: { regex: ours('cli/'), message: 'Nothing imports src/cli: it is an entry point.' },
  adapter: {
    regex: ours('storage/(?!types\\.js$)'),
    message:
      'Outside src/storage only the port (storage/types.ts) may be imported; the adapter in use is chosen in src/services.ts through storage/connect.ts. Take what you need as a parameter.',
  },
  adapterFromRoot: {
    regex: ours('storage/(?!(?:types|connect)\\.js$)'),
    message: 'The composition root reaches storage through storage/connect.ts and the port (storage/types.ts) only.',
  },
  services: { regex: ours('services/'), message: 'This layer is below the services (src/README.md).' },
  servicesValues: {
    regex: ours('services/'),
    types: true,
    message: 'Resources may use the types services return, not their code.',
  },
  sync: {
    regex: ours('sync/'),
    message: 'src/sync is reached through the services the composition root builds (services.traffic).',
  },
  syncValues: {
    regex: ours('sync/'),
    types: true,
    message: 'src/http reaches the traffic sync through services.traffic; only its types may be imported.',
  },
  resources: {
    regex: ours('resources/'),
    message:
      'Services hand records to their callers; turning them into public JSON (src/resources) is the job of http and cli.',
  },
  root: {
    regex: ours('(?:services|config|main)\\.js$'),
    message:
      'The composition root (src/main.ts, src/services.ts, src/config.ts) builds this layer and passes it what it needs; this layer does not import it.',
  },
  rootValues: {
    regex: ours('(?:services|config)\\.js$'),
    types: true,
    message: 'Routes get services and config from buildApp; only the Services and Config types may be imported.',
  },
  outsideDomain: {
    regex: '^\\.\\./',
    message: 'src/domain is pure: it imports nothing of ours outside src/domain (libraries are fine).',
  },
};

/** What each folder may not import. Exemptions are listed, each with its reason, below the table. */
const forbidden = {
  'src/domain/**': ['outsideDomain'],
  'src/storage/**': ['http', 'cli', 'services', 'sync', 'resources', 'root'],
  'src/services/**': ['http', 'cli', 'adapter', 'sync', 'resources', 'root'],
  'src/sync/**': ['http', 'cli', 'adapter', 'resources', 'root'],
  'src/resources/**': ['http', 'cli', 'adapter', 'sync', 'servicesValues', 'root'],
  'src/http/**': ['cli', 'adapter', 'syncValues', 'rootValues'],
  'src/cli/**': ['http', 'adapter'],
  'src/main.ts': ['cli', 'adapterFromRoot'],
  'src/services.ts': ['http', 'cli', 'adapterFromRoot'],
  'src/config.ts': ['http', 'cli', 'adapterFromRoot'],
  // The composition root of destination delivery: where it runs (delivery.ts), and the worker thread's entry.
  'src/delivery.ts': ['http', 'cli', 'adapterFromRoot'],
  'src/delivery-worker.ts': ['http', 'cli', 'adapterFromRoot'],
  // What transformation steps run with, built from the settings (both of the above use it).
  'src/transform-runtime.ts': ['http', 'cli', 'adapterFromRoot'],
  // test/, bench/ and scripts/ may import anything: they test and measure every layer, adapters included.
};

const exemptions = [];

function restrictedImports(names, extra = []) {
  const patterns = names.map((name) => {
    const { regex, message, types } = layer[name];
    return { regex, message, ...(types ? { allowTypeImports: true } : {}) };
  });
  return ['error', { patterns: [...patterns, ...extra] }];
}

const layering = [
  ...Object.entries(forbidden).map(([glob, names]) => ({
    files: [glob],
    rules: { '@typescript-eslint/no-restricted-imports': restrictedImports(names) },
  })),
  ...exemptions.map(({ files, forbid, extra }) => ({
    files,
    rules: { '@typescript-eslint/no-restricted-imports': restrictedImports(forbid, extra) },
  })),
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'data/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setImmediate: 'readonly',
        URL: 'readonly',
        fetch: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-empty-object-type': 'off',
    },
  },
  ...layering,
  // Modules, not god closures (STYLE.md): a function that outgrows a screenful is split by concern into
  // functions that take what they use. Blank lines and comments count.
  { files: ['src/**/*.ts'], rules: { 'max-lines-per-function': ['error', { max: 150 }] } },
  // The web console (console/, issue 14): browser code, bundled by Vite; it talks to the service over HTTP
  // only, so it may import nothing of src/.
  {
    files: ['console/**/*.{ts,tsx}'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [{ regex: '(?:^|/)src/', message: 'The console reaches the service through the admin API only.' }],
        },
      ],
    },
  },
);

export { layer, forbidden };
