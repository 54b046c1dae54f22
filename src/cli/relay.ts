/**
 * `conveyor relay`: moves outbox events to a target (poll or cdc mode) until SIGTERM, and the
 * operator's view of the outbox: its lag and its set-aside events.
 */
import { ConveyorError } from "../core/errors.js";
import { consoleLogger } from "../core/logger.js";
import { migrateOutbox, openDeadLetters, openSource, openTarget, outboxLocation } from "../outbox/open.js";
import { Relay } from "../outbox/relay.js";
import { dbUrl, intOption, namingSqliteProblems, parse, UsageError } from "./args.js";
import { duration, printable, printableLines, printJson, table, time } from "./format.js";
import { shown } from "../core/checks.js";

export const help = `conveyor relay --db URL --target URL [options]        publish outbox events until SIGTERM
conveyor relay dead ls --db URL [--limit N] [--json]           events a target refused for good, newest first
conveyor relay dead show ID --db URL                           one set-aside event with its payload and error
conveyor relay dead replay ID [ID...] --db URL                 back into the outbox, behind its key's waiting events
conveyor relay dead rm ID [ID...] --db URL                     delete set-aside events for good
conveyor relay --mode cdc --setup | --teardown --db URL        create / drop the publication and replication slot

--db URL            the outbox: postgres://…[?schema=NAME] or sqlite:PATH (CONVEYOR_DB)
--target URL        amqp://user:pass@host:5672/vhost   RabbitMQ (exchange --exchange, default conveyor.outbox)
                    redis://host:6379                  Redis Streams (stream = --stream-prefix + topic)
                    kafka://host:9092[,host:9092][/T]  Kafka (topic T, else --topic-prefix + topic; key = outbox key, acks=all)
                    https://…                          webhook (--webhook-secret whsec_… or CONVEYOR_WEBHOOK_SECRET)
                    conveyor+postgres://… | conveyor+redis://… | conveyor+sqlite:PATH   a Conveyor queue (--queue)
--mode poll|cdc     poll the table (default; PostgreSQL or SQLite) or read the WAL (PostgreSQL, wal_level=logical)
--topic A,B         relay only these topics (default all)
--batch-size N      events per round (default 500)
--poll-interval MS  longest idle wait between looks at the outbox (default 1000; SQLite 100)
--backoff-max MS    longest retry delay while the target fails (default 30000; full jitter from 100)
--queue NAME        conveyor+…: the queue receiving the jobs (job name = topic, job id = outbox id)
--exchange NAME     amqp: the topic exchange (default conveyor.outbox)
--declare-queue Q   amqp: declare a durable quorum queue Q bound to the exchange, with dead-letter exchange Q.dlx → Q.dead
--binding-key K     amqp: binding of --declare-queue (default #)
--stream-prefix P   redis: stream name prefix (default outbox:)
--maxlen N          redis: trim each stream to about N entries (XADD MAXLEN ~ N)
--topic-prefix P    kafka: Kafka topic = P + the event's topic (default none)
--allow HOSTS       webhook: hosts / CIDRs let through the SSRF guard (internal receivers)
--slot NAME         cdc: replication slot (default conveyor_outbox_<schema>)
--publication NAME  cdc: publication (default conveyor_outbox_<schema>)
--max-retained-wal BYTES  cdc: warn when the slot holds back more WAL (default 1073741824)
--lease MS          sqlite: how long a relay's hold on the outbox outlives its last renewal; a
                    crashed relay's successor waits this long (default 30000, at least 1000)
--stats-interval MS log a stats line (lag, rate, failures) this often (default 10000; 0: never)`;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    target: { type: "string" },
    mode: { type: "string", default: "poll" },
    topic: { type: "string" },
    "batch-size": { type: "string" },
    "poll-interval": { type: "string" },
    "backoff-max": { type: "string" },
    queue: { type: "string" },
    exchange: { type: "string" },
    "declare-queue": { type: "string" },
    "binding-key": { type: "string" },
    "stream-prefix": { type: "string" },
    "topic-prefix": { type: "string" },
    maxlen: { type: "string" },
    "webhook-secret": { type: "string", multiple: true },
    allow: { type: "string" },
    slot: { type: "string" },
    publication: { type: "string" },
    "max-retained-wal": { type: "string" },
    "stats-interval": { type: "string" },
    lease: { type: "string" },
    setup: { type: "boolean", default: false },
    teardown: { type: "boolean", default: false },
    limit: { type: "string" },
  });
  if (values.help) {
    console.log(help);
    return 0;
  }
  const db = dbUrl(values.db);
  if (positionals[0] === "dead")
    return namingSqliteProblems(db, () => dead(db, positionals.slice(1), values.json === true, intOption("limit", values.limit, 1)));
  if (positionals.length > 0) throw new UsageError(`unknown subcommand "relay ${positionals[0]}"; use relay dead …, or options only`);

  const mode = values.mode;
  if (mode !== "poll" && mode !== "cdc") throw new UsageError(`--mode must be poll or cdc; got ${shown(mode)}`);
  const topics =
    typeof values.topic === "string"
      ? values.topic
          .split(",")
          .map((t) => t.trim())
          .filter(Boolean)
      : [];
  const cdc = {
    ...(typeof values.slot === "string" ? { slot: values.slot } : {}),
    ...(typeof values.publication === "string" ? { publication: values.publication } : {}),
    ...(values["max-retained-wal"] !== undefined ? { maxRetainedWalBytes: intOption("max-retained-wal", values["max-retained-wal"], 1)! } : {}),
  };

  if (values.setup || values.teardown) {
    if (mode !== "cdc") throw new UsageError("--setup and --teardown belong to --mode cdc (poll mode needs only `conveyor migrate`)");
    const where = outboxLocation(db);
    if (where.kind !== "postgres") throw new UsageError("--mode cdc needs a PostgreSQL outbox");
    await migrateOutbox(db);
    const { CdcSource } = await import("../outbox/relay-cdc.js");
    const source = new CdcSource({ connectionString: where.connectionString, schema: where.schema, ...cdc });
    try {
      if (values.setup) {
        const { created } = await source.setup();
        console.log(created.length ? `created ${created.join(" and ")}` : `publication ${source.publication} and slot ${source.slot} already exist`);
      } else {
        const { dropped } = await source.teardown();
        console.log(dropped.length ? `dropped ${dropped.join(" and ")}` : "nothing to drop");
      }
    } finally {
      await source.close();
    }
    return 0;
  }

  if (typeof values.target !== "string" || values.target === "") throw new UsageError("--target URL is required");
  const secrets = (values["webhook-secret"] as string[] | undefined) ?? (process.env.CONVEYOR_WEBHOOK_SECRET ? [process.env.CONVEYOR_WEBHOOK_SECRET] : []);
  const maxLen = intOption("maxlen", values.maxlen, 1);
  await namingSqliteProblems(db, () => migrateOutbox(db));
  const target = await openTarget(values.target, {
    ...(typeof values.queue === "string" ? { queue: values.queue } : {}),
    ...(typeof values.exchange === "string" ? { exchange: values.exchange } : {}),
    ...(typeof values["declare-queue"] === "string" ? { declareQueue: values["declare-queue"] } : {}),
    ...(typeof values["binding-key"] === "string" ? { bindingKey: values["binding-key"] } : {}),
    ...(typeof values["stream-prefix"] === "string" ? { streamPrefix: values["stream-prefix"] } : {}),
    ...(maxLen !== undefined ? { maxLen } : {}),
    ...(typeof values["topic-prefix"] === "string" ? { topicPrefix: values["topic-prefix"] } : {}),
    webhookSecrets: secrets,
    allow:
      typeof values.allow === "string"
        ? values.allow
            .split(",")
            .map((s) => s.trim())
            .filter(Boolean)
        : [],
  });
  const leaseMs = intOption("lease", values.lease, 1_000);
  const source = await openSource(db, { mode, topics, cdc, ...(leaseMs !== undefined ? { sqliteLeaseMs: leaseMs } : {}) }).catch(async (error: unknown) => {
    await target.close();
    throw error;
  });
  const logger = consoleLogger({ verbose: true });
  const batchSize = intOption("batch-size", values["batch-size"], 1);
  const pollIntervalMs = intOption("poll-interval", values["poll-interval"], 1);
  const backoffMaxMs = intOption("backoff-max", values["backoff-max"], 100);
  const relay = new Relay({
    source,
    target,
    logger,
    ...(batchSize !== undefined ? { batchSize } : {}),
    ...(pollIntervalMs !== undefined ? { pollIntervalMs } : {}),
    ...(backoffMaxMs !== undefined ? { backoffMaxMs } : {}),
  });
  relay.on("relay:retry", ({ error, pending, failures, delayMs }) =>
    logger.warn({ target: target.description, error: error.message, pending, failures, delayMs }, "outbox relay: the target failed; backing off"),
  );

  let stopping = false;
  const stopped = new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      if (stopping) process.exit(1);
      stopping = true;
      logger.info({ signal }, "outbox relay: stopping after the round in progress");
      resolve();
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
  try {
    await relay.start();
  } catch (error) {
    await relay.close().catch(() => undefined);
    if (error instanceof ConveyorError) throw error;
    throw new ConveyorError(`could not start the relay: ${(error as Error).message}`, { cause: error });
  }
  logger.info({ source: source.description, target: target.description, mode }, "outbox relay: running");
  const statsIntervalMs = intOption("stats-interval", values["stats-interval"], 0) ?? 10_000;
  const timer =
    statsIntervalMs > 0
      ? setInterval(() => {
          relay.stats().then(
            (s) => logger.info({ ...s }, "outbox relay: stats"),
            () => undefined,
          );
        }, statsIntervalMs)
      : null;
  await stopped;
  if (timer) clearInterval(timer);
  await relay.close();
  return 0;
}

async function dead(db: string, args: string[], json: boolean, limit: number | undefined): Promise<number> {
  const [sub, ...ids] = args;
  const { dead: store, close } = await openDeadLetters(db);
  try {
    if (sub === "ls" || sub === undefined) {
      const events = await store.list({ limit: limit ?? 50 });
      if (json) printJson(events);
      else if (events.length === 0) console.log("no set-aside outbox events");
      else {
        const now = Date.now();
        console.log(
          table(
            ["id", "topic", "key", "set aside", "age", "target", "error"],
            events.map((e) => [e.id, e.topic, e.key, time(e.failedAt), duration(now - e.createdAt), e.target, e.error.slice(0, 80)]),
          ),
        );
      }
      return 0;
    }
    if (sub === "show") {
      const event = ids[0] ? await store.get(ids[0]) : null;
      if (!ids[0]) throw new UsageError("which event? conveyor relay dead show ID");
      if (event === null) {
        console.error(`no set-aside outbox event ${printable(ids[0])}`);
        return 1;
      }
      if (json) printJson(event);
      else {
        // Stored text, printable: an event's key, error or payload may hold anything.
        console.log(
          `id:        ${printable(event.id)}\ntopic:     ${printable(event.topic)}\nkey:       ${printable(event.key ?? "-")}\ncreated:   ${time(event.createdAt)}`,
        );
        console.log(
          `set aside: ${time(event.failedAt)} by ${printable(event.target)}\nerror:     ${printableLines(event.error)}\nheaders:   ${printable(JSON.stringify(event.headers))}\npayload:   ${printableLines(event.payloadText)}`,
        );
      }
      return 0;
    }
    if (sub === "replay" || sub === "rm") {
      if (ids.length === 0) throw new UsageError(`which events? conveyor relay dead ${sub} ID [ID...]`);
      const done = sub === "replay" ? await store.replay(ids) : await store.remove(ids);
      const missing = ids.filter((id) => !done.includes(id));
      if (json) printJson({ [sub === "replay" ? "replayed" : "removed"]: done, missing });
      else {
        console.log(`${sub === "replay" ? "replayed" : "removed"} ${done.length} event(s)`);
        if (missing.length) console.log(`not set aside: ${missing.map(printable).join(", ")}`);
      }
      return missing.length === 0 ? 0 : 1;
    }
    throw new UsageError(`unknown subcommand "relay dead ${sub}"; use ls, show, replay or rm`);
  } finally {
    await close();
  }
}
