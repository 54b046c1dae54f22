import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

/** The digits of a job id made by newJobId: Crockford base32, lower case. */
export const JOB_ID_DIGITS = "0123456789abcdefghjkmnpqrstvwxyz";

let lastMs = 0;
let counter = 0;

/**
 * A job id that sorts by creation time: 10 chars of milliseconds, 4 of a per-millisecond counter,
 * 8 random. Ids made in one process are strictly increasing, which keeps index inserts at the
 * right-hand edge of the B-tree.
 */
export function newJobId(now: number = Date.now()): string {
  if (now > lastMs) {
    lastMs = now;
    counter = 0;
  } else {
    counter++;
    if (counter >= 32 ** 4) {
      lastMs++;
      counter = 0;
    }
  }
  let out = "";
  let t = lastMs;
  for (let i = 0; i < 10; i++) {
    out = JOB_ID_DIGITS[t % 32]! + out;
    t = Math.floor(t / 32);
  }
  let c = counter;
  let cs = "";
  for (let i = 0; i < 4; i++) {
    cs = JOB_ID_DIGITS[c % 32]! + cs;
    c = Math.floor(c / 32);
  }
  let r = "";
  for (let i = 0; i < 8; i++) r += JOB_ID_DIGITS[nextRandomByte() & 31]!;
  return out + cs + r;
}

// randomBytes per id costs more than the rest of an enqueue; draw them in blocks instead.
let pool = Buffer.alloc(0);
let poolOffset = 0;
function nextRandomByte(): number {
  if (poolOffset >= pool.length) {
    pool = randomBytes(4096);
    poolOffset = 0;
  }
  return pool[poolOffset++]!;
}

/** A worker id unique across hosts and restarts: host, pid and a random suffix. */
export function newWorkerId(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`;
}

/**
 * The host and pid a worker id of newWorkerId's form holds (`<host>:<pid>:<suffix>`, the suffix
 * without a colon; the host is all before the pid and may hold colons), or null for an id of
 * another form.
 */
export function workerIdHostAndPid(id: string): { host: string; pid: number } | null {
  const beforeSuffix = id.lastIndexOf(":");
  const beforePid = beforeSuffix <= 0 ? -1 : id.lastIndexOf(":", beforeSuffix - 1);
  if (beforePid < 0) return null;
  const pid = id.slice(beforePid + 1, beforeSuffix);
  if (!/^(0|[1-9]\d{0,15})$/.test(pid) || !Number.isSafeInteger(Number(pid))) return null;
  return { host: id.slice(0, beforePid), pid: Number(pid) };
}
