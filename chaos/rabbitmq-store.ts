/**
 * RabbitMQ as a chaos store: a private broker node (testkit/servers/rabbitmq.ts) the runner owns,
 * its faults, and the view of the broker the harness needs to judge a store that keeps no job
 * records (docs/amqp.md, "What a broker cannot do").
 *
 * Faults:
 * - "store-crash" is a **graceful** broker stop (SIGTERM, the node shuts down cleanly) and a
 *   start on the same data. Not a SIGKILL: RabbitMQ 3.10 on a single node loses messages it
 *   confirmed in the last moments before a SIGKILL (docs/amqp.md, "Durability notes"), which is
 *   the broker's write path, not something a client can make up for; a run with it would report
 *   those as lost, correctly, and prove nothing about Conveyor.
 * - "conn-cut": the broker closes every client connection (producer, workers, the runner's own),
 *   as `rabbitmqctl close_all_connections` does, and requeues their unacknowledged deliveries.
 */
import type { ChannelModel } from "amqplib";
import { findRabbitServer, startThrowawayRabbit, waitForAmqp, type ThrowawayRabbit } from "../testkit/servers/rabbitmq.js";
import { CHAOS_QUEUE } from "./jobs.js";
import type { Store } from "./stores.js";

/** The delay queues a Conveyor queue may have (`<prefix>~<queue>~delay~K`, K = 0…MAX_DELAY_BUCKET). */
const MAX_DELAY_BUCKET = 22;

/** How the harness reads a broker that keeps no job records. */
export interface BrokerView {
  /**
   * Messages of the chaos queue not finished yet, ready or delivered and unacknowledged, in the
   * work queue and every delay queue of the scenario's prefix (`rabbitmqctl list_queues`, which
   * counts what the workers hold too). Null when the broker cannot answer.
   */
  unfinished(url: string): Promise<number | null>;
  /**
   * The job ids (`messageId`) of every message still in the work queue or a delay queue. Read
   * with `basic.get` and never acknowledged: they go back when the channel closes. Call once the
   * workers are gone.
   */
  queuedIds(url: string): Promise<string[]>;
}

export function rabbitmqUnavailable(): string | null {
  return findRabbitServer() === null ? "no rabbitmq-server under /usr/lib/rabbitmq (apt-get install rabbitmq-server)" : null;
}

function prefixOf(url: string): string {
  return new URL(url).searchParams.get("prefix") ?? "conveyor";
}

function brokerUrl(url: string): string {
  const parsed = new URL(url);
  parsed.search = "";
  return parsed.toString();
}

export async function rabbitmqStore(label: (text: string) => string): Promise<Store> {
  const server: ThrowawayRabbit = await startThrowawayRabbit();
  const view: BrokerView = {
    unfinished: async (url) => {
      const base = `${prefixOf(url)}~${CHAOS_QUEUE}`;
      try {
        const out = await server.ctl(["list_queues", "-q", "--no-table-headers", "name", "messages"]);
        let n = 0;
        let workQueueSeen = false;
        for (const line of out.split("\n")) {
          const [name, count] = line.trim().split(/\s+/);
          if (!name || count === undefined) continue;
          if (!/^\d+$/.test(count)) return null;
          if (name === base) workQueueSeen = true;
          if (name === base || name.startsWith(`${base}~delay~`)) n += Number(count);
        }
        // A node still booting (or its queues not yet recovered) lists nothing: that is no answer,
        // not an empty queue (a drain once ended on it with 1117 jobs still queued).
        return workQueueSeen ? n : null;
      } catch {
        return null;
      }
    },
    queuedIds: async (url) => {
      const base = `${prefixOf(url)}~${CHAOS_QUEUE}`;
      const { connect } = await import("amqplib");
      const connection: ChannelModel = await connect(brokerUrl(url));
      connection.on("error", () => undefined);
      const ids: string[] = [];
      try {
        for (const name of [base, ...Array.from({ length: MAX_DELAY_BUCKET + 1 }, (_, k) => `${base}~delay~${k}`)]) {
          // A queue that was never declared closes the channel with 404: a fresh channel each.
          const channel = await connection.createChannel();
          channel.on("error", () => undefined);
          try {
            await channel.checkQueue(name);
          } catch {
            continue;
          }
          for (;;) {
            const message = await channel.get(name, { noAck: false });
            if (message === false) break;
            ids.push(String(message.properties.messageId ?? `(no messageId in ${name})`));
          }
          // Closing without acknowledging puts every message read back.
          await channel.close().catch(() => undefined);
        }
      } finally {
        await connection.close().catch(() => undefined);
      }
      return ids;
    },
  };
  return {
    kind: "rabbitmq",
    urlFor: (name: string) => `${server.url}?prefix=chaos-${label(name)}`,
    crashHow:
      "graceful broker stop (SIGTERM) and start on the same data; never SIGKILL: RabbitMQ 3.10 on one node loses messages confirmed just before a SIGKILL (docs/amqp.md)",
    crashMode: "server",
    crash: () => server.terminate(),
    restart: () => server.start(),
    // The broker answers the AMQP protocol header (retried for up to 1.5 s).
    probe: () =>
      waitForAmqp(server.port, 1_500).then(
        () => true,
        () => false,
      ),
    cut: async () => {
      // `rabbitmqctl close_all_connections` waits for each connection to finish closing, which a
      // SIGSTOPped worker holds up for as long as it is stopped: the closes run asynchronously on
      // the node instead (the same rabbit_networking:close_connection the command uses), and the
      // node answers with the connections it closed, 300 ms later (their deliveries requeued by then).
      const out = await server.ctl([
        "eval",
        'Ps = rabbit_networking:connections(), [spawn(fun() -> rabbit_networking:close_connection(P, "chaos: connection closed by the server") end) || P <- Ps], timer:sleep(300), Ps.',
      ]);
      return (out.match(/<\d+\.\d+\.\d+>/g) ?? []).length;
    },
    broker: view,
    close: () => server.stop(),
  };
}
