// The one outbound guard (clarifications §4, events-out §6 "SSRF"). Every connection Inlet opens to
// another host passes here: webhook deliveries, NATS servers, PostgreSQL warehouses (connected to the
// address checked here: destinations/postgres.ts), and the traffic providers' HTTP calls (src/sync/provider.ts).
//
// Rules, for a host name and each address it resolves to:
// - INLET_OUTBOUND_ALLOW set (a comma list of host names, addresses and CIDRs): the host name or the
//   address must be on it. Unset: any public address.
// - Loopback, private, link-local, unique-local, CGNAT, unspecified and multicast addresses are refused
//   unless INLET_OUTBOUND_ALLOW_PRIVATE is on (and, with an allow list, the address is on it too).
// - Cloud metadata addresses (169.254.169.254, fd00:ec2::254, 100.100.100.200) are refused even then,
//   unless INLET_OUTBOUND_ALLOW names them explicitly.
// The check runs when a destination is created or edited (`checkUrl`/`checkHost`: resolves the name)
// and again at connect time: HTTP goes through `outboundDispatcher()`, whose connector resolves the name
// itself, checks every address and connects to the checked one, so DNS rebinding between the two
// checks gains nothing. A refused connection is never attempted.
//
// A refusal says why and which setting would allow the target. It is the operator's decision, not a
// passing fault: callers never retry it (`guardRefusal` finds it under the errors HTTP clients wrap
// it in). A name that does not resolve is refused too, but that may pass: it is not a guard refusal.
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { Agent, buildConnector, type Dispatcher } from 'undici';

export interface OutboundPolicy {
  /** INLET_OUTBOUND_ALLOW: host names, addresses and CIDRs; undefined: any public address. */
  allow: string[] | undefined;
  /** INLET_OUTBOUND_ALLOW_PRIVATE (formerly INLET_DESTINATIONS_ALLOW_PRIVATE). */
  allowPrivate: boolean;
}

export class OutboundRefused extends Error {
  readonly code = 'OUTBOUND_REFUSED';
  /** True when the policy refuses the address (until the settings change); false when the name did not resolve. */
  readonly byPolicy: boolean;
  constructor(message: string, options: { byPolicy?: boolean } = {}) {
    super(message);
    this.name = 'OutboundRefused';
    this.byPolicy = options.byPolicy ?? true;
  }
}

/**
 * The guard's refusal behind `error` (itself, or a cause of it: fetch wraps connection errors in
 * "fetch failed"), when the policy refused the target; undefined for every other failure.
 */
export function guardRefusal(error: unknown): OutboundRefused | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; depth++) {
    if (current instanceof OutboundRefused) return current.byPolicy ? current : undefined;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv6');
}
const METADATA = new Set(['169.254.169.254', 'fd00:ec2::254', '100.100.100.200']);

/** An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged as the IPv4 address it carries. */
function normalise(address: string): { address: string; family: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return { address: mapped[1]!, family: 'ipv4' };
  return { address, family: isIP(address) === 6 ? 'ipv6' : 'ipv4' };
}

/** Parses INLET_OUTBOUND_ALLOW entries; throws on a malformed CIDR. */
export function parseAllowList(entries: string[]): { hosts: Set<string>; addresses: BlockList } {
  const hosts = new Set<string>();
  const addresses = new BlockList();
  for (const entry of entries) {
    const [net, prefix] = entry.split('/') as [string, string | undefined];
    const family = isIP(net);
    if (family === 0) {
      if (prefix !== undefined) throw new Error(`"${entry}" is not a CIDR`);
      hosts.add(net.toLowerCase());
      continue;
    }
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) addresses.addAddress(net, type);
    else {
      const bits = Number(prefix);
      if (!/^\d{1,3}$/.test(prefix) || bits > (family === 6 ? 128 : 32))
        throw new Error(`"${entry}" has a bad prefix length`);
      addresses.addSubnet(net, bits, type);
    }
  }
  return { hosts, addresses };
}

function resolveAll(host: string): Promise<LookupAddress[]> {
  const name = host.replace(/^\[|\]$/g, '');
  if (isIP(name) !== 0) return Promise.resolve([{ address: name, family: isIP(name) }]);
  return new Promise((resolve, reject) => {
    dnsLookup(name, { all: true }, (error, addresses) => (error ? reject(error) : resolve(addresses)));
  });
}

/** A guard for one policy: services.ts makes one from its config; tests may make others. */
export function createOutboundGuard(policy: OutboundPolicy) {
  const allowed = parseAllowList(policy.allow ?? []);

  /**
   * Why connecting to `address` (which `host` resolved to) is refused, and which settings would allow it;
   * undefined when it is allowed.
   */
  function refusal(host: string, rawAddress: string): string | undefined {
    const { address, family } = normalise(rawAddress);
    const name = host.replace(/^\[|\]$/g, '').toLowerCase();
    const listed = allowed.hosts.has(name) || allowed.addresses.check(address, family);
    const isPrivate = PRIVATE.check(address, family);
    const alsoPrivate = isPrivate && !policy.allowPrivate ? ' with INLET_OUTBOUND_ALLOW_PRIVATE=true' : '';
    if (policy.allow !== undefined && !listed)
      return `${host} (${address}) is not on INLET_OUTBOUND_ALLOW; listing it there${alsoPrivate} would allow it`;
    if (METADATA.has(address.toLowerCase()) && !listed)
      return `${host} resolves to ${address}, a cloud metadata address; only naming it in INLET_OUTBOUND_ALLOW${alsoPrivate} would allow it`;
    if (isPrivate && !policy.allowPrivate)
      return `${host} resolves to ${address}, a loopback, private or link-local address (INLET_OUTBOUND_ALLOW_PRIVATE is off); INLET_OUTBOUND_ALLOW_PRIVATE=true would allow it`;
    return undefined;
  }

  /** Resolves `host` and throws OutboundRefused unless every address it resolves to is allowed. */
  async function checkHost(host: string): Promise<LookupAddress[]> {
    let addresses: LookupAddress[];
    try {
      addresses = await resolveAll(host);
    } catch (error) {
      throw new OutboundRefused(`${host} does not resolve: ${(error as Error).message}`, { byPolicy: false });
    }
    if (addresses.length === 0) throw new OutboundRefused(`${host} does not resolve`, { byPolicy: false });
    for (const { address } of addresses) {
      const reason = refusal(host, address);
      if (reason !== undefined) throw new OutboundRefused(reason);
    }
    return addresses;
  }

  /**
   * The lookup the connector uses: resolves, refuses the whole name if any address is refused (so a
   * name mixing a public and a private address cannot be used to reach the private one), and answers
   * in the form net.connect asked for.
   */
  function guardedLookup(
    hostname: string,
    options: { all?: boolean } | number,
    callback: (...args: unknown[]) => void,
  ): void {
    checkHost(hostname).then(
      (addresses) => {
        if (typeof options === 'object' && options.all) callback(null, addresses);
        else callback(null, addresses[0]!.address, addresses[0]!.family);
      },
      (error: unknown) => callback(error),
    );
  }

  let dispatcher: Dispatcher | undefined;

  return {
    policy,
    refusal,
    checkHost,
    /** checkHost for a URL's host. */
    async checkUrl(url: string): Promise<void> {
      await checkHost(new URL(url).hostname);
    },
    /**
     * The undici dispatcher for outbound HTTP: connects only to allowed addresses. Name lookups go
     * through guardedLookup; an address literal (which net.connect does not look up) is checked before
     * connecting. Redirects are never followed (undici's request() and fetch with this dispatcher and
     * redirect: 'manual' do not follow them).
     */
    dispatcher(): Dispatcher {
      if (dispatcher !== undefined) return dispatcher;
      const base = buildConnector({ lookup: guardedLookup as never });
      const connect: buildConnector.connector = (options, callback) => {
        const host = options.hostname.replace(/^\[|\]$/g, '');
        if (isIP(host) !== 0) {
          const reason = refusal(options.hostname, host);
          if (reason !== undefined) {
            callback(new OutboundRefused(reason), null);
            return;
          }
        }
        base(options, callback);
      };
      dispatcher = new Agent({ connect });
      return dispatcher;
    },
  };
}

export type OutboundGuard = ReturnType<typeof createOutboundGuard>;

/**
 * The guard of code that was handed none: public addresses only. Everything services.ts builds gets a
 * guard made from the config instead (INLET_OUTBOUND_ALLOW, INLET_OUTBOUND_ALLOW_PRIVATE).
 */
const strictGuard = createOutboundGuard({ allow: undefined, allowPrivate: false });

export function outboundGuard(): OutboundGuard {
  return strictGuard;
}

/** The strict guard's dispatcher (a provider built without `RetryPolicy.dispatcher`). */
export function outboundDispatcher(): Dispatcher {
  return strictGuard.dispatcher();
}
