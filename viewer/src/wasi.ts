// The WASI a replayed controller sees, answered as docs/replay.md specifies:
// clocks that move only with journaled inputs, randomness derived from the
// run's seed, a fresh in-memory worktree whose stat and metadata hashes leak
// no time. Streams, stdio and the filesystem's mechanics come from jco's
// preview2 shim.
import * as cli from '@bytecodealliance/preview2-shim/cli';
import * as filesystem from '@bytecodealliance/preview2-shim/filesystem';
import * as io from '@bytecodealliance/preview2-shim/io';
import * as http from '@bytecodealliance/preview2-shim/http';
import { sha256 } from './sha256';

const te = new TextEncoder();

function le64(n: bigint): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt.asUintN(64, n), true);
  return b;
}

/** One of the two byte streams derived from the seed, read front to back. */
export class SeedStream {
  private block = 0n;
  private buf: Uint8Array<ArrayBuffer> = new Uint8Array(0);
  private pos = 0;
  constructor(private readonly domain: string, private readonly seed: bigint) {}

  next(n: number): Uint8Array {
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      if (this.pos === this.buf.length) {
        const d = te.encode(this.domain);
        const input = new Uint8Array(d.length + 16);
        input.set(d);
        input.set(le64(this.seed), d.length);
        input.set(le64(this.block), d.length + 8);
        this.buf = sha256(input) as Uint8Array<ArrayBuffer>;
        this.pos = 0;
        this.block += 1n;
      }
      const take = Math.min(n - filled, this.buf.length - this.pos);
      out.set(this.buf.subarray(this.pos, this.pos + take), filled);
      filled += take;
      this.pos += take;
    }
    return out;
  }
  u64(): bigint {
    return new DataView(this.next(8).buffer).getBigUint64(0, false);
  }
  bytes(n: bigint): Uint8Array {
    const count = Number(n);
    const raw = this.next(count * 4);
    const out = new Uint8Array(count);
    for (let i = 0; i < count; i++) out[i] = raw[i * 4 + 3];
    return out;
  }
}

/** The run's clock: `now_ms` moves only when an answer is taken. */
export class ReplayClock {
  nowMs: bigint;
  constructor(readonly startedMs: bigint) {
    this.nowMs = startedMs;
  }
  advanceTo(atMs: bigint): void {
    if (atMs > this.nowMs) this.nowMs = atMs;
  }
}

function typeName(t: string): string {
  return t.split('-').map((w) => w[0].toUpperCase() + w.slice(1)).join('');
}

function metadataHash(stat: { type: string; size: bigint; linkCount: bigint }) {
  const name = te.encode(`DescriptorType::${typeName(stat.type)}`);
  const input = new Uint8Array(22 + name.length + 16);
  input.set(te.encode('cairn metadata hash v1'));
  input.set(name, 22);
  input.set(le64(BigInt(stat.size)), 22 + name.length);
  input.set(le64(BigInt(stat.linkCount)), 30 + name.length);
  const h = new DataView(sha256(input).buffer);
  return { lower: h.getBigUint64(0, true), upper: h.getBigUint64(8, true) };
}

let patched = false;
function patchDescriptor(): void {
  if (patched) return;
  patched = true;
  const proto = (filesystem.types as any).Descriptor.prototype;
  const { stat, statAt } = proto;
  const timeless = (s: any) => ({
    ...s,
    dataAccessTimestamp: undefined,
    dataModificationTimestamp: undefined,
    statusChangeTimestamp: undefined,
  });
  proto.stat = function () {
    return timeless(stat.call(this));
  };
  proto.statAt = function (flags: any, path: string) {
    return timeless(statAt.call(this, flags, path));
  };
  proto.metadataHash = function () {
    return metadataHash(stat.call(this));
  };
  proto.metadataHashAt = function (flags: any, path: string) {
    return metadataHash(statAt.call(this, flags, path));
  };
}

/** The WASI imports of one replay: `seed` and `clock` from its `started` entry. */
/**
 * `wasi:http` for a replay: the types, so a component that imports them
 * (every default componentize-js build does) instantiates; a request is
 * not answered here (the journal holds it, the page cannot hand it over
 * synchronously): `sent` is told, and the guest gets an error.
 */
export function httpImports(sent: () => void) {
  return {
    'wasi:http/types': http.types,
    'wasi:http/outgoing-handler': {
      handle: () => {
        sent();
        throw { tag: 'internal-error', val: 'outgoing HTTP is not replayed in the browser' };
      },
    },
  };
}

/** A look at a run's timer (docs/replay.md, timers): whether the journal
 * says it is ready at this look (moving the clock when it is). */
export type TimerLook = (timer: number, look: number) => boolean;

export function wasiImports(
  seed: bigint,
  clock: ReplayClock,
  root: Record<string, any> = {},
  timerLook: TimerLook = () => false,
) {
  patchDescriptor();
  // The run's worktree: the snapshot its generation started from (empty
  // when the journal names none), like an offline replay's scratch.
  (filesystem as any)._setPreopens({ '/': { dir: root } });
  const secure = new SeedStream('', seed);
  const insecure = new SeedStream('insecure', seed);
  // Timers are numbered in the guest's order; each look is counted, and
  // the journal decides at which one a timer is ready (a zero duration: at
  // its second). A blocking wait is one look; the page never waits.
  let timers = 0;
  const timer = (ns: bigint) => {
    const id = ns === 0n ? 0 : ++timers;
    let looks = 0;
    return (io as any).pollableCreate({
      ready: () => {
        looks++;
        return id === 0 ? looks >= 2 : timerLook(id, looks);
      },
      wait: () => new Promise(() => {}),
    });
  };
  const monotonicNow = () => (clock.nowMs - clock.startedMs) * 1_000_000n;
  return {
    'wasi:cli/environment': {
      getEnvironment: () => [],
      getArguments: () => [],
      initialCwd: () => undefined,
    },
    'wasi:cli/exit': cli.exit,
    'wasi:cli/stderr': cli.stderr,
    'wasi:cli/stdin': cli.stdin,
    'wasi:cli/stdout': cli.stdout,
    'wasi:cli/terminal-input': cli.terminalInput,
    'wasi:cli/terminal-output': cli.terminalOutput,
    'wasi:cli/terminal-stderr': cli.terminalStderr,
    'wasi:cli/terminal-stdin': cli.terminalStdin,
    'wasi:cli/terminal-stdout': cli.terminalStdout,
    'wasi:clocks/monotonic-clock': {
      now: monotonicNow,
      resolution: () => 1_000_000n,
      subscribeInstant: (when: bigint) => timer(when > monotonicNow() ? when - monotonicNow() : 0n),
      subscribeDuration: (ns: bigint) => timer(BigInt(ns)),
    },
    'wasi:clocks/wall-clock': {
      now: () => ({ seconds: clock.nowMs / 1000n, nanoseconds: Number(clock.nowMs % 1000n) * 1_000_000 }),
      resolution: () => ({ seconds: 0n, nanoseconds: 1_000_000 }),
    },
    'wasi:filesystem/preopens': filesystem.preopens,
    'wasi:filesystem/types': filesystem.types,
    'wasi:io/error': io.error,
    'wasi:io/poll': io.poll,
    'wasi:io/streams': io.streams,
    'wasi:random/random': {
      getRandomBytes: (n: bigint) => secure.bytes(n),
      getRandomU64: () => secure.u64(),
    },
    'wasi:random/insecure': {
      getInsecureRandomBytes: (n: bigint) => insecure.bytes(n),
      getInsecureRandomU64: () => insecure.u64(),
    },
    'wasi:random/insecure-seed': {
      insecureSeed: () => [seed, 0n],
    },
  };
}
