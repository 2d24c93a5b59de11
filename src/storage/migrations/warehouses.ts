// Warehouse destinations (warehouses.md): versions 550–599. The warehouse keeps its own layout and load
// positions (services/destinations/warehouse/layout.ts); Inlet's database only keeps, on the destination, the
// latest warnings of a limit reached (a JSON list) and how many columns its loads added and widened, which the
// admin API and the console show.
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
  {
    version: 551,
    name: 'destination columns added and widened',
    statements: {
      sqlite: [
        `ALTER TABLE destinations ADD COLUMN columns_added INTEGER NOT NULL DEFAULT 0`,
        `ALTER TABLE destinations ADD COLUMN type_widenings INTEGER NOT NULL DEFAULT 0`,
      ],
      postgres: [
        `ALTER TABLE destinations ADD COLUMN columns_added INTEGER NOT NULL DEFAULT 0`,
        `ALTER TABLE destinations ADD COLUMN type_widenings INTEGER NOT NULL DEFAULT 0`,
      ],
    },
  },
];
