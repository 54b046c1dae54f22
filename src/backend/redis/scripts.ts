/**
 * The Lua scripts, one per atomic transition (lua/<name>-<number of keys>.lua), and how they are
 * called: by SHA (EVALSHA), so a call sends a 40-byte hash instead of the script. A Redis that
 * restarted or ran SCRIPT FLUSH answers NOSCRIPT; the call is then sent once more with the source
 * (EVAL), which also puts the script back in Redis' cache, so the next call by SHA works again.
 * Nothing ran when Redis answered NOSCRIPT, so sending the call again is safe.
 *
 * Each script is known by a versioned name, `conveyor.<name>.v<layout>`, used in errors. Its
 * identity in Redis is its SHA: two Conveyor versions sharing one Redis run their own scripts
 * side by side and never call each other's.
 *
 * On Redis 7 and newer every script starts with a `#!lua` shebang, which makes Redis check two
 * things the scripts rely on: in cluster mode it refuses any key outside the slot of the
 * script's first key (so a key-layout mistake fails loudly instead of half-working), and when
 * memory is full it refuses a writing script before it starts, rather than at its first write,
 * which would leave a transition half applied. Read-only scripts are flagged `no-writes`, so they
 * still run then. Older servers get the same scripts without the shebang, which they cannot parse.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ConveyorError } from "../../core/errors.js";
import { LAYOUT_VERSION } from "./keys.js";
import { layoutRefusal } from "./layout-error.js";
import { helpersFor, parseLuaHelpers } from "./lua-helpers.js";
import { hashTagOf } from "./slot-migration.js";

export type ScriptName =
  | "enqueue"
  | "claim"
  | "heartbeat"
  | "mark-buffered"
  | "complete"
  | "fail"
  | "release"
  | "progress"
  | "append-logs"
  | "rescue"
  | "promote"
  | "prune"
  | "cancel"
  | "replay"
  | "remove"
  | "pause"
  | "stats"
  | "read"
  | "lane-position"
  | "once"
  | "prune-keys"
  | "layout"
  | "layout-stamp"
  | "flow"
  | "flow-set"
  | "flow-hold"
  | "schedule-upsert"
  | "schedule-remove"
  | "schedule-list"
  | "schedule-fire"
  | "prune-events"
  | "read-events"
  | "queues-at"
  | "read-streams"
  | "ready";

/** One way of sending a script: its text and the SHA Redis knows it by. */
export interface ScriptText {
  readonly source: string;
  readonly sha: string;
}

export interface Script {
  /** `conveyor.<name>.v<layout>`, for messages. */
  readonly fullName: string;
  /** Keys the caller names; the runner adds the ready index (below) and, on a cluster, the slot probe. */
  readonly numberOfKeys: number;
  /**
   * It may write the ready index `<prefix>:ready` (its helpers include `ready_write`; one server
   * only): the runner names that key as the call's last key, so the script declares every key it
   * touches (Redis' rule for scripts, which its slot checks and Cluster rely on), and the script
   * takes it off KEYS into READY_KEY before its body runs.
   */
  readonly keepsReadyIndex: boolean;
  /** The helpers of `_common.lua` it uses followed by the script's own file, for any Redis. */
  readonly plain: ScriptText;
  /** The same behind a `#!lua` shebang with the script's flags, for Redis 7 and newer. */
  readonly flagged: ScriptText;
}

/** Scripts that never write: flagged so Redis runs them on replicas and when memory is full. */
const READ_ONLY: ReadonlySet<string> = new Set(["stats", "read", "schedule-list", "lane-position", "ready", "read-events", "queues-at", "read-streams"]);

/**
 * Scripts that take any number of keys, at least the number their file name says (one per queue
 * read, say): the keys a call names are all the keys it touches, as for every other script.
 */
const VARIADIC_KEYS: ReadonlySet<ScriptName> = new Set(["read-streams"]);

/**
 * How each script meets the layout guard (`layout_guard` in _common.lua), run before its own body:
 * - `stamp`: its first key is the queue's meta hash and it may write job data: it refuses a queue
 *   stamped by a newer layout, and stamps this layout;
 * - `check`: read-only on the queue's meta: it refuses a newer stamp and writes nothing;
 * - `none`: it touches no job data a layout changes (a job's log or progress under a lease the
 *   claim already checked, flow-control and schedule settings, the event log, prefix-wide keys).
 * A Record, so a new script must choose.
 */
const LAYOUT_GUARD: Readonly<Record<ScriptName, "stamp" | "check" | "none">> = {
  enqueue: "stamp",
  claim: "stamp",
  heartbeat: "stamp",
  "mark-buffered": "stamp",
  complete: "stamp",
  fail: "stamp",
  release: "stamp",
  rescue: "stamp",
  promote: "stamp",
  prune: "stamp",
  cancel: "stamp",
  replay: "stamp",
  remove: "stamp",
  pause: "stamp",
  flow: "stamp",
  "schedule-fire": "stamp",
  "layout-stamp": "stamp",
  stats: "check",
  read: "check",
  "lane-position": "check",
  progress: "none",
  "append-logs": "none",
  "flow-set": "none",
  "flow-hold": "none",
  "schedule-upsert": "none",
  "schedule-remove": "none",
  "schedule-list": "none",
  "prune-events": "none",
  "read-events": "none",
  "queues-at": "none",
  "read-streams": "none",
  once: "none",
  "prune-keys": "none",
  layout: "none",
  ready: "none",
};

/**
 * The Lua that runs before a script's body: on a cluster it takes the slot probe off the end of
 * KEYS (see {@link slotProbeKey}), so the body sees exactly its own keys; then the layout guard
 * (nothing for `none`).
 */
function guardLine(name: ScriptName, cluster: boolean): string {
  const guard = LAYOUT_GUARD[name];
  return (cluster ? "table.remove(KEYS)\n" : "") + (guard === "none" ? "" : `layout_guard(KEYS[1], ${guard === "stamp"})\n`);
}

/**
 * The slot probe of a script call on a cluster: a key in the slot of the script's first key that
 * never exists, named as the call's last key.
 *
 * While a slot is being moved (redis-cli --cluster reshard: MIGRATE a few keys at a time), some of a
 * queue's keys are on the source node and the rest on the target (all of them share the slot: the
 * `{queue}` hash tag). A script whose named keys were all still on one side ran there, and failed at
 * the first unnamed key that had left ("Script attempted to access a non local key"), keeping what
 * it wrote before (Redis does not roll a script back): a rescue took a job out of `active` and
 * stopped before requeueing it. On the target (after an ASK) a key not yet arrived read as missing.
 * Redis refuses a call that names a missing key while its slot is open, before running it: ASK from
 * the source, TRYAGAIN from the target for several keys with one missing. A key that never exists
 * is always missing, so every script of the slot is refused on both sides until the move ends, with
 * nothing written; the caller sees the slot-migration refusal it already handles (slot-migration.ts).
 * On a slot that is not moving a missing key changes nothing. The key hashes to the first key's slot:
 * the hash tag is that key's tag, or the whole key when it has none.
 */
export function slotProbeKey(firstKey: string): string {
  return `{${hashTagOf(firstKey)}}:conveyor-slot-probe`;
}

/**
 * `--#include <file> as <name>` on a line of its own puts another script's body there as a local
 * function, so one script can run another's transition as part of its own atomic step (the
 * included script's KEYS and ARGV are the caller's, as the caller arranged them).
 */
const INCLUDE_LINE = /^--#include ([a-z-]+-\d+\.lua) as ([a-z_]+)$/gm;

function withIncludes(source: string, dir: URL): string {
  return source.replace(INCLUDE_LINE, (_line, file: string, name: string) => `local function ${name}()\n${readFileSync(new URL(file, dir), "utf8")}\nend`);
}

/**
 * How long an add (enqueue, flow) sent over a connection that may resend it keeps its reply for a
 * resend to answer, ms (attempt_replay in lua/_common.lua). It must outlast the client's resend:
 * ioredis' Cluster resends within its redirection budget (16 tries, seconds). Costs one small key
 * (about 170 bytes of Redis memory) per such call for this long.
 */
export const ADD_ATTEMPT_MEMORY_MS = 300_000;

/** A script whose helpers define this may write the ready index (see `Script.keepsReadyIndex`). */
const READY_WRITER = /^local function ready_write\(/m;

/**
 * The first line of such a script: the ready index key off the end of KEYS. A caller that did not
 * name it (a script called by hand with the file's key count) is refused before anything is
 * written, instead of taking its last own key for the index.
 */
const READY_KEY_LINE =
  "local READY_KEY = table.remove(KEYS)\n" +
  "if type(READY_KEY) ~= 'string' or string.sub(READY_KEY, -6) ~= ':ready' then error('conveyor: the last key must be the ready index <prefix>:ready') end\n";

/** Scripts that take one more key than their file name says: the add's attempt key (keys.ts `addAttempt`). */
const ATTEMPT_KEYED: ReadonlySet<ScriptName> = new Set(["enqueue", "flow"]);

/** A value Redis accepts as a script argument. */
export type ScriptArg = string | number;

/** The script sets, by whether they write the event log and run on a cluster; each read once per process. */
const cache = new Map<string, ReadonlyMap<ScriptName, Script>>();

/**
 * Reads the scripts next to this module (once per process and set). The package build copies the
 * lua folder next to the compiled backend, so source and build read the same files.
 *
 * `eventLog` picks the set: with false every script is the same but for a first line
 * `local EVENT_LOG = false`, which makes `log_event` (lua/_common.lua) write nothing. The two
 * sets have different SHAs, so processes on one Redis with different settings never share a
 * script; one prefix has one setting (RedisBackend checks it against the prefix's record).
 * `cluster` (a Redis Cluster connection): every script first takes the slot probe off its KEYS
 * (see {@link slotProbeKey}), and `READY_INDEX` is false: the ready index (`ready_mark` in
 * lua/_common.lua) is one key for every queue, which on a cluster is outside the queues' slots.
 */
export function loadScripts(eventLog = true, cluster = false): ReadonlyMap<ScriptName, Script> {
  const setName = `${String(eventLog)} ${String(cluster)}`;
  const cached = cache.get(setName);
  if (cached !== undefined) return cached;
  const dir = new URL("./lua/", import.meta.url);
  let files: string[];
  let common: string;
  try {
    files = readdirSync(dir).filter((f) => f.endsWith(".lua") && !f.startsWith("_"));
    common = readFileSync(new URL("_common.lua", dir), "utf8");
  } catch (error) {
    throw new ConveyorError(
      `Conveyor's Redis scripts are missing from ${fileURLToPath(dir)}; the package build must copy ` + `src/backend/redis/lua next to backend.js`,
      { cause: error },
    );
  }
  const helpers = parseLuaHelpers(common);
  const scripts = new Map<ScriptName, Script>();
  for (const file of files) {
    const match = /^([a-z-]+?)-(\d+)\.lua$/.exec(file);
    if (match === null) {
      throw new ConveyorError(`unexpected file ${file} in ${fileURLToPath(dir)}; scripts are named <name>-<keys>.lua`);
    }
    const name = match[1]! as ScriptName;
    if (!(name in LAYOUT_GUARD)) throw new ConveyorError(`Redis script ${file} has no entry in LAYOUT_GUARD (scripts.ts); say how it meets the layout guard`);
    const body = `${guardLine(name, cluster)}${withIncludes(readFileSync(new URL(file, dir), "utf8"), dir)}`;
    // Only the helpers this script uses: Redis builds every helper again on each call (lua-helpers.ts).
    const used = helpersFor(helpers, body);
    const writesReady = READY_WRITER.test(used);
    const keepsReadyIndex = !cluster && writesReady;
    // On a cluster the index is not kept (READY_INDEX false): READY_KEY is defined, never used.
    const readyLine = keepsReadyIndex ? READY_KEY_LINE : writesReady ? "local READY_KEY = false\n" : "";
    // STREAM_ID_TIME: events may give their stream id's time (`<ms>-*`, log_event), which Redis 7 takes,
    // the server the `#!lua` variant is sent to; the plain one, for older servers, does not.
    const source = (streamIdTime: boolean) =>
      `local LAYOUT = ${LAYOUT_VERSION}\nlocal EVENT_LOG = ${String(eventLog)}\nlocal READY_INDEX = ${String(!cluster)}\n` +
      `local STREAM_ID_TIME = ${String(streamIdTime)}\nlocal ADD_ATTEMPT_MEMORY_MS = ${ADD_ATTEMPT_MEMORY_MS}\n${readyLine}${used}\n${body}`;
    scripts.set(name, {
      fullName: `conveyor.${name}.v${LAYOUT_VERSION}${eventLog ? "" : ".no-event-log"}`,
      numberOfKeys: Number(match[2]),
      keepsReadyIndex,
      plain: text(source(false)),
      flagged: text(`#!lua${READ_ONLY.has(name) ? " flags=no-writes" : ""}\n${source(true)}`),
    });
  }
  cache.set(setName, scripts);
  return scripts;
}

function text(source: string): ScriptText {
  return { source, sha: createHash("sha1").update(source).digest("hex") };
}

/** Sends one command (EVALSHA, EVAL or SCRIPT) with its arguments and returns Redis' reply. */
export type SendCommand = (command: "EVALSHA" | "EVAL" | "SCRIPT", args: ScriptArg[]) => Promise<unknown>;

/** Calls scripts by SHA, recovering from NOSCRIPT. */
export class ScriptRunner {
  /** Send the `#!lua` variants (Redis 7+); set once the server's version is known. */
  flagged = false;

  /**
   * @param send how commands reach Redis (the backend routes them through its connection guard)
   * @param cluster true for Redis Cluster, where SCRIPT LOAD would reach one node only
   * @param onFailure told of every failed call with its keys, before the error is explained (rescue-hold.ts)
   * @param onAnswer told of every call Redis answered, with its keys (rescue-hold.ts)
   */
  constructor(
    private readonly send: SendCommand,
    private readonly cluster: boolean,
    private readonly scripts: ReadonlyMap<ScriptName, Script> = loadScripts(),
    private readonly onFailure?: (keys: readonly string[], error: unknown) => void,
    private readonly onAnswer?: (keys: readonly string[]) => void,
    /** The ready index key, `<prefix>:ready`, which scripts that keep it are given as their last key. */
    private readonly readyKey?: string,
  ) {}

  /** Runs a script; `keys` must match its key count (a programming error otherwise). */
  async run(name: ScriptName, keys: readonly string[], args: readonly ScriptArg[]): Promise<unknown> {
    const script = this.scripts.get(name);
    if (script === undefined) throw new ConveyorError(`no Redis script named ${name}; the lua folder is incomplete`);
    const attemptKeyed = ATTEMPT_KEYED.has(name) && keys.length === script.numberOfKeys + 1;
    const variadic = VARIADIC_KEYS.has(name) && keys.length > script.numberOfKeys;
    if (keys.length !== script.numberOfKeys && !attemptKeyed && !variadic) {
      throw new ConveyorError(`${script.fullName} takes ${script.numberOfKeys}${VARIADIC_KEYS.has(name) ? " or more" : ""} keys, was given ${keys.length}`);
    }
    const { sha, source } = this.flagged ? script.flagged : script.plain;
    // One array, built once and never spread into a call: a bulk enqueue has far more arguments
    // than a JS call stack can take. Its first element is the SHA, or the source on a retry. On a
    // cluster the slot probe (slotProbeKey) is the last key.
    // On one server a script that keeps the ready index names it last.
    const readyKey = script.keepsReadyIndex ? this.readyKey : undefined;
    if (script.keepsReadyIndex && readyKey === undefined) throw new ConveyorError(`${script.fullName} needs the ready index key; the runner was given none`);
    const keyCount = keys.length + (this.cluster || readyKey !== undefined ? 1 : 0);
    const command: ScriptArg[] = new Array<ScriptArg>(2 + keyCount + args.length);
    command[0] = sha;
    command[1] = keyCount;
    for (let i = 0; i < keys.length; i++) command[2 + i] = keys[i]!;
    if (this.cluster) command[2 + keys.length] = slotProbeKey(keys[0] ?? "");
    else if (readyKey !== undefined) command[2 + keys.length] = readyKey;
    for (let i = 0; i < args.length; i++) {
      const arg = args[i]!;
      // ioredis would send null as "" and NaN as "NaN", and a script that fails half-way keeps what
      // it wrote (Redis does not roll a script back): refuse such an argument before anything runs.
      if (!(typeof arg === "string" || (typeof arg === "number" && Number.isFinite(arg)))) {
        throw new ConveyorError(`${script.fullName} argument ${i + 1} is ${String(arg)}, not a string or finite number; nothing was written`);
      }
      command[2 + keyCount + i] = arg;
    }
    try {
      let reply: unknown;
      try {
        reply = await this.send("EVALSHA", command);
      } catch (error) {
        if (!isNoScript(error)) throw error;
        command[0] = source;
        reply = await this.send("EVAL", command);
      }
      this.onAnswer?.(keys);
      return reply;
    } catch (error) {
      this.onFailure?.(keys, error);
      throw explain(error, script, keys[0]);
    }
  }

  /**
   * Puts every script into Redis' cache ahead of the first call. Only on a single server: on a
   * cluster SCRIPT LOAD reaches one node, and the NOSCRIPT fallback loads each node on first use.
   */
  async loadAll(): Promise<void> {
    if (this.cluster) return;
    await Promise.all(
      [...this.scripts.values()].map(async (script) => {
        const { sha, source } = this.flagged ? script.flagged : script.plain;
        const loaded = await this.send("SCRIPT", ["LOAD", source]);
        if (loaded !== sha) throw new ConveyorError(`Redis hashed ${script.fullName} to ${String(loaded)}, expected ${sha}`);
      }),
    );
  }
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("NOSCRIPT");
}

/**
 * Errors Redis reported about a script get its name and, where there is one, advice. Connection
 * errors pass through untouched: callers (the worker runtime) retry those.
 */
function explain(error: unknown, script: Script, firstKey: string | undefined): unknown {
  if (!(error instanceof Error) || error.name !== "ReplyError") return error;
  const tooNew = layoutRefusal(error.message, firstKey);
  if (tooNew !== null) return tooNew;
  if (error.message.startsWith("OOM")) {
    return new ConveyorError(
      `Redis refused ${script.fullName}: it is out of memory (${error.message}). Raise maxmemory, or keep fewer ` +
        `finished jobs (removeOnComplete / removeOnFail, prune retention)`,
      { cause: error },
    );
  }
  return new ConveyorError(`Redis script ${script.fullName} failed: ${error.message}`, { cause: error });
}
