// Transformations §3: the enrichment steps' lookups. `user_agent` gives browser, OS and device with absent keys when
// unknown; `bot` flags the crawlers of a maintained list and not browsers; `geoip` reads a MaxMind-format database
// (a small one written here, never downloaded) into country (ISO code), region, city, latitude and longitude.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  GeoIpDatabaseError,
  geoIpFromBuffer,
  isBot,
  openGeoIp,
  parseUserAgent,
  type GeoIp,
} from '../../src/services/transformations/enrichment.js';
import { buildMmdb, cityRecord, writeMmdb } from '../support/mmdb-writer.js';

const chromeWindows =
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.6099.109 Safari/537.36';
const safariIphone =
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1';
const firefoxLinux = 'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0';
const samsungAndroid =
  'Mozilla/5.0 (Linux; Android 13; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36';
const edgeMac =
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91';
const ipadSafari =
  'Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/16.6 Mobile/15E148 Safari/604.1';

describe('user_agent: browser, OS and device (§3)', () => {
  it('reads a desktop Chrome on Windows, with no device keys it does not know', () => {
    assert.deepEqual(parseUserAgent(chromeWindows), {
      browser: { name: 'Chrome', version: '120.0.6099.109' },
      os: { name: 'Windows', version: '10' },
      device: {},
    });
  });

  it('reads an iPhone’s Safari with its device', () => {
    assert.deepEqual(parseUserAgent(safariIphone), {
      browser: { name: 'Mobile Safari', version: '17.1' },
      os: { name: 'iOS', version: '17.1' },
      device: { type: 'mobile', vendor: 'Apple', model: 'iPhone' },
    });
  });

  it('reads a Samsung phone and a tablet', () => {
    const samsung = parseUserAgent(samsungAndroid);
    assert.equal(samsung.browser.name, 'Samsung Internet');
    assert.deepEqual(samsung.os, { name: 'Android', version: '13' });
    assert.equal(samsung.device.type, 'mobile');
    assert.equal(samsung.device.vendor, 'Samsung');
    assert.equal(parseUserAgent(ipadSafari).device.type, 'tablet');
  });

  it('leaves every key absent for what is not a browser’s user agent', () => {
    assert.deepEqual(parseUserAgent(''), { browser: {}, os: {}, device: {} });
    assert.deepEqual(parseUserAgent('???'), { browser: {}, os: {}, device: {} });
  });

  it('shares one frozen answer per user agent, so writing into one event can never change the next', () => {
    const first = parseUserAgent(firefoxLinux);
    assert.equal(parseUserAgent(firefoxLinux), first);
    assert.throws(() => {
      (first.browser as Record<string, string>).name = 'changed';
    }, TypeError);
    assert.throws(() => {
      (first as unknown as Record<string, unknown>).device = {};
    }, TypeError);
    assert.deepEqual(parseUserAgent(firefoxLinux), {
      browser: { name: 'Firefox', version: '121.0' },
      os: { name: 'Ubuntu' },
      device: {},
    });
  });

  it('bounds the work on a hostile user agent', () => {
    const started = performance.now();
    parseUserAgent('Mozilla/5.0 ('.repeat(5000));
    isBot('a'.repeat(100_000) + 'bot');
    assert.ok(performance.now() - started < 2000);
  });
});

describe('bot: the crawler-user-agents list (§3)', () => {
  const list = createRequire(import.meta.url)('crawler-user-agents') as { pattern: string; instances: string[] }[];

  it('flags every sample user agent the list gives for its patterns', () => {
    const samples = list.flatMap(({ instances }) => instances);
    assert.ok(samples.length > 1000, `${samples.length} samples`);
    const missed = samples.filter((sample) => !isBot(sample));
    assert.deepEqual(missed, []);
  });

  it('flags the well-known crawlers and automated clients', () => {
    for (const agent of [
      'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
      'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)',
      'curl/8.4.0',
      'python-requests/2.31.0',
      'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.0; +https://openai.com/gptbot)',
    ])
      assert.equal(isBot(agent), true, agent);
  });

  it('answers as one regular expression of the whole list would, on any text', () => {
    const naive = new RegExp(list.map(({ pattern }) => `(?:${pattern})`).join('|'));
    const fragment = fc.oneof(
      fc
        .constantFrom(...list.flatMap(({ instances }) => instances.slice(0, 1)))
        .chain((sample) =>
          fc
            .tuple(fc.nat(sample.length), fc.nat(sample.length))
            .map(([a, b]) => sample.slice(Math.min(a, b), Math.max(a, b))),
        ),
      fc.string({ maxLength: 6 }),
      fc.constantFrom(chromeWindows, safariIphone, ' ', '/', 'bot', 'Bot', '(compatible; '),
    );
    fc.assert(
      fc.property(fc.array(fragment, { maxLength: 6 }), (parts) => {
        const text = parts.join('');
        assert.equal(isBot(text), naive.test(text), text);
      }),
      { numRuns: 300 },
    );
  });

  it('does not flag the browsers people use', () => {
    for (const agent of [chromeWindows, safariIphone, firefoxLinux, samsungAndroid, edgeMac, ipadSafari])
      assert.equal(isBot(agent), false, agent);
  });
});

describe('geoip: a MaxMind-format database (§3, §8)', () => {
  let dir: string;
  let geo: GeoIp;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'inlet-geoip-'));
    writeMmdb(join(dir, 'city.mmdb'), [
      {
        network: '203.0.113.0/24',
        record: cityRecord({
          country: 'FR',
          region: 'Île-de-France',
          city: 'Paris',
          latitude: 48.8566,
          longitude: 2.3522,
        }),
      },
      { network: '198.51.100.0/25', record: cityRecord({ country: 'DE' }) },
      {
        network: '2001:db8::/32',
        record: cityRecord({ country: 'JP', region: 'Tokyo', city: 'Tokyo', latitude: 35.6895, longitude: 139.6917 }),
      },
    ]);
    writeFileSync(join(dir, 'not-a-database.mmdb'), 'just text');
    geo = await openGeoIp(join(dir, 'city.mmdb'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('gives country (ISO code), region and city in English, latitude and longitude as numbers', () => {
    assert.equal(geo.databaseType, 'GeoLite2-City');
    assert.deepEqual(geo.lookup('203.0.113.7'), {
      country: 'FR',
      region: 'Île-de-France',
      city: 'Paris',
      latitude: 48.8566,
      longitude: 2.3522,
    });
    assert.deepEqual(geo.lookup('2001:db8::42'), {
      country: 'JP',
      region: 'Tokyo',
      city: 'Tokyo',
      latitude: 35.6895,
      longitude: 139.6917,
    });
  });

  it('leaves out what the database does not know', () => {
    assert.deepEqual(geo.lookup('198.51.100.9'), { country: 'DE' });
  });

  it('reads an IPv4 client seen through a dual-stack socket', () => {
    assert.equal(geo.lookup('::ffff:203.0.113.7')?.city, 'Paris');
  });

  it('answers nothing for an address outside the database or not an address at all', () => {
    for (const address of ['198.51.100.200', '192.0.2.1', '::1', 'not-an-ip', '', '203.0.113', '999.1.1.1'])
      assert.equal(geo.lookup(address), undefined, address);
  });

  it('refuses a file that is missing or not a MaxMind database, naming the setting', async () => {
    for (const name of ['missing.mmdb', 'not-a-database.mmdb']) {
      await assert.rejects(openGeoIp(join(dir, name)), (error: unknown) => {
        assert.ok(error instanceof GeoIpDatabaseError);
        assert.match(error.message, /^INLET_GEOIP_DATABASE: cannot open ".*" as a MaxMind database/);
        return true;
      });
    }
  });

  it('reads the same database from memory', () => {
    const inMemory = geoIpFromBuffer(buildMmdb([{ network: '192.0.2.0/24', record: cityRecord({ country: 'NL' }) }]));
    assert.deepEqual(inMemory.lookup('192.0.2.77'), { country: 'NL' });
  });
});
