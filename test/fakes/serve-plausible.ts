// Runs the Plausible fake as a standalone process for trying the traffic sync by hand (used for the
// example in docs/traffic-reports.md):  node --import tsx test/fakes/serve-plausible.ts
// It serves site "example.com" with API key "plausible-demo-key" and a few rows for the last 3 days.
import { startPlausibleFake } from './plausible-fake.js';

const day = (n: number) => new Date(Date.now() - n * 86_400_000).toISOString().slice(0, 10);
const fake = await startPlausibleFake({
  siteId: 'example.com',
  apiKey: 'plausible-demo-key',
  rows: [
    {
      date: day(2),
      source: 'Google',
      utm_medium: '(not set)',
      utm_campaign: '(not set)',
      entry_page: '/pricing',
      visitors: 111,
      visits: 120,
      pageviews: 305,
      bounce_rate: 35,
      visit_duration: 195,
    },
    {
      date: day(1),
      source: 'Google',
      utm_medium: '(not set)',
      utm_campaign: '(not set)',
      entry_page: '/pricing',
      visitors: 70,
      visits: 80,
      pageviews: 150,
      bounce_rate: 50,
      visit_duration: 120,
    },
    {
      date: day(1),
      source: 'Direct / None',
      utm_medium: '(not set)',
      utm_campaign: '(not set)',
      entry_page: '/',
      visitors: 75,
      visits: 80,
      pageviews: 140,
      bounce_rate: 49,
      visit_duration: 63,
    },
    {
      date: day(1),
      source: 'Newsletter',
      utm_medium: 'email',
      utm_campaign: 'june',
      entry_page: '/blog/launch',
      visitors: 40,
      visits: 42,
      pageviews: 90,
      bounce_rate: 20,
      visit_duration: 240,
    },
  ],
});
process.stdout.write(`Plausible fake listening on ${fake.url}\n`);
process.on('SIGTERM', () => void fake.close().then(() => process.exit(0)));
process.on('SIGINT', () => void fake.close().then(() => process.exit(0)));
