/**
 * The chaos producer: a separate process that enqueues through the public Queue API, at a steady
 * rate plus optional bursts, with a job mix drawn from the run's seed. Every job gets a unique id
 * (`j<incarnation>-<n>`); the ledger gets an `invoke` record before each add and `ok`, `fail` or
 * `unknown` after it, each fsynced. Restarted after a crash with the next incarnation number.
 *
 * Configuration: the CHAOS_PRODUCER environment variable, JSON (see ProducerConfig).
 * SIGTERM: stop adding, wait for the adds in flight, exit 0.
 */
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { openBackend } from "../src/backend/open.js";
import { InvalidInputError, Queue, type Backend, type BulkJob } from "../src/index.js";
import { CHAOS_QUEUE, KINDS, payloadFor, type Mix } from "./jobs.js";
import { AppendLog } from "./ledger.js";
import { Prng } from "./prng.js";
import { PILL_KINDS, type JobKind } from "./records.js";

export interface ProducerConfig {
  url: string;
  dir: string;
  seed: number;
  incarnation: number;
  /** Jobs per second, steady. */
  ratePerSec: number;
  mix: Mix;
  /** Extra bursts of `size` jobs (one addBulk) every `everyMs`, to create a backlog. */
  bursts?: { everyMs: number; size: number };
  /** One poison pill every `everyMs`, the four kinds in turns (a shuffled round per four pills). */
  pills?: { everyMs: number };
  /** Adds in flight at most; beyond that the producer skips a tick (the store is slow or down). */
  maxInFlight: number;
  /** Queues to spread the jobs over, in turns (default: CHAOS_QUEUE only). */
  queues?: string[];
}

function readConfig(): ProducerConfig {
  const text = process.env.CHAOS_PRODUCER;
  if (!text) throw new Error("CHAOS_PRODUCER (JSON config) is not set");
  return JSON.parse(text) as ProducerConfig;
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

async function main(): Promise<void> {
  const config = readConfig();
  const ledger = new AppendLog(join(config.dir, `enqueues-${config.incarnation}.jsonl`));
  const prng = new Prng(config.seed).fork(`producer:${config.incarnation}`);
  let stopping = false;
  process.on("SIGTERM", () => (stopping = true));
  process.on("SIGINT", () => (stopping = true));

  let backend: Backend | null = null;
  for (let attempt = 0; backend === null && !stopping; attempt++) {
    try {
      backend = await openBackend(config.url);
    } catch (error) {
      process.stderr.write(`producer: cannot open the store yet (${describe(error)}); retrying\n`);
      await sleep(Math.min(2_000, 100 * 2 ** attempt));
    }
  }
  if (backend === null) return;
  const queues = (config.queues ?? [CHAOS_QUEUE]).map((name) => new Queue(name, { backend }));
  let turn = 0;

  let seq = 0;
  let pillBag: JobKind[] = [];
  const nextJob = (pill = false): { id: string; kind: JobKind; job: BulkJob } => {
    if (pill && pillBag.length === 0) pillBag = prng.shuffle(PILL_KINDS);
    const kind = pill ? pillBag.shift()! : prng.weighted(config.mix as Record<JobKind, number>);
    const spec = KINDS[kind];
    const id = `j${config.incarnation}-${++seq}`;
    const job: BulkJob = {
      name: kind,
      data: payloadFor(kind, prng),
      options: {
        jobId: id,
        attempts: spec.attempts,
        backoff: { type: "fixed", delayMs: spec.backoffMs },
        ...(spec.timeoutMs !== null ? { timeoutMs: spec.timeoutMs } : {}),
        // Keep every finished job: the checker reads them all at the end.
        removeOnComplete: false,
        removeOnFail: false,
      },
    };
    return { id, kind, job };
  };

  let inFlight = 0;
  const pending = new Set<Promise<void>>();
  const add = (count: number, pill = false) => {
    const jobs = Array.from({ length: count }, () => nextJob(pill));
    for (const j of jobs) {
      const spec = KINDS[j.kind];
      ledger.append({
        t: "invoke",
        id: j.id,
        kind: j.kind,
        designed: spec.designed,
        maxAttempts: spec.attempts,
        at: Date.now(),
        incarnation: config.incarnation,
      });
    }
    inFlight++;
    const queue = queues[turn++ % queues.length]!;
    const call = queue
      .addBulk(jobs.map((j) => j.job))
      .then(
        (results) => {
          const at = Date.now();
          results.forEach((r, i) => ledger.append({ t: "ok", id: jobs[i]!.id, at, duplicate: r.duplicate }));
        },
        (error: unknown) => {
          const at = Date.now();
          // Refused before anything was written: definitely not stored. Anything else (a cut
          // connection, a timeout, a crashed store) may or may not have committed.
          const definite = error instanceof InvalidInputError;
          for (const j of jobs) ledger.append({ t: definite ? "fail" : "unknown", id: j.id, at, error: describe(error) });
        },
      )
      .finally(() => {
        inFlight--;
        pending.delete(call);
      });
    pending.add(call);
  };

  const tickMs = 1_000 / config.ratePerSec;
  let nextTick = Date.now();
  let nextBurst = config.bursts ? Date.now() + config.bursts.everyMs : Infinity;
  let nextPill = config.pills ? Date.now() + config.pills.everyMs : Infinity;
  while (!stopping) {
    const now = Date.now();
    if (now >= nextPill && config.pills) {
      nextPill += config.pills.everyMs;
      if (inFlight < config.maxInFlight) add(1, true);
    }
    if (now >= nextBurst && config.bursts) {
      nextBurst += config.bursts.everyMs;
      if (inFlight < config.maxInFlight) add(config.bursts.size);
    }
    while (nextTick <= now) {
      nextTick += tickMs;
      if (inFlight < config.maxInFlight) add(1);
    }
    await sleep(Math.max(1, Math.min(nextTick, nextBurst, nextPill) - Date.now()));
  }
  // Let the adds in flight finish (their outcome goes to the ledger), then leave.
  await Promise.race([Promise.allSettled([...pending]), sleep(15_000)]);
  await backend.close().catch(() => undefined);
  ledger.close();
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`producer failed: ${describe(error)}\n`);
    process.exit(1);
  },
);
