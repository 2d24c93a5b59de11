// Warehouse destinations (warehouses.md): versions 550–599. The warehouse keeps its own layout and load
// positions (services/destinations/warehouse/layout.ts); Inlet's database only keeps, on the destination, the
// latest warnings of a limit reached (a JSON list, shown by the admin API and the console).
import type { Migration } from './index.js';

export const warehouseMigrations: Migration[] = [
  {
    version: 550,
    name: 'destination warnings',
    statements: {
      sqlite: [`ALTER TABLE destinations ADD COLUMN warnings TEXT`],
      postgres: [`ALTER TABLE destinations ADD COLUMN warnings TEXT`],
    },
  },
];
