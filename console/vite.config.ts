// The console's build: `vite build console` (run by `npm run build` and by `prepare`, so `npm ci` builds it)
// writes hashed assets to dist/console, served by the service under /console (src/http/console.ts).
// Preact's automatic JSX runtime through Vite's own transform: no framework plugin, no Babel.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: '../dist/console',
    emptyOutDir: true,
    target: 'es2022',
    // One small app: no source maps in the served assets, no chunk-size noise.
    sourcemap: false,
    reportCompressedSize: true,
  },
  server: {
    // `npm run dev:console`: the API of a local Inlet (npm run dev) behind Vite's dev server.
    proxy: { '/admin': 'http://127.0.0.1:3000', '/readyz': 'http://127.0.0.1:3000' },
  },
});
