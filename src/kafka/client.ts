/**
 * The one place Conveyor opens a Kafka client (kafkajs, an optional peer dependency loaded on
 * first use), shared by the outbox's Kafka target and the `conveyor-jobs/kafka` consumer
 * transport: the `kafka://` URL, the client options and the bridge from kafkajs's log lines to a
 * Conveyor logger. Why kafkajs and not Confluent's librdkafka binding: docs/kafka.md.
 */
import type { Kafka, KafkaConfig, logCreator } from "kafkajs";
import { InvalidInputError } from "../core/errors.js";
import type { Logger } from "../core/logger.js";
import { shown } from "../core/checks.js";

/** Where a Kafka cluster is: `kafka://host:port[,host:port…][/topic]`. */
export interface KafkaLocation {
  /** `host:port` seed brokers. */
  brokers: string[];
  /** The URL's path, when it names one topic ("" when none). */
  topic: string;
}

/** Parses `kafka://host:port[,host:port…][/topic]`; throws InvalidInputError saying what to fix. */
export function parseKafkaUrl(url: string): KafkaLocation {
  const match = /^kafka:\/\/([^/?#]+)(?:\/([^?#]*))?$/i.exec(url);
  if (!match) throw new InvalidInputError(`a Kafka URL looks like kafka://host:9092[,host2:9092][/topic]; got ${shown(url)}`);
  const brokers = match[1]!
    .split(",")
    .map((b) => b.trim())
    .filter(Boolean);
  for (const broker of brokers) {
    if (!/^[^:\s]+:\d{1,5}$/.test(broker))
      throw new InvalidInputError(`Kafka broker ${JSON.stringify(broker)} must be host:port (kafka://host:9092,host2:9092)`);
  }
  return { brokers, topic: decodeURIComponent(match[2] ?? "") };
}

/** Options every Conveyor Kafka client takes. */
export interface KafkaClientOptions {
  /** Seed brokers, `host:port`. */
  brokers: string[];
  /** Client id the brokers see in their logs and quotas. */
  clientId: string;
  /** kafkajs's own warnings and errors go here (info and debug are dropped). Default: dropped. */
  logger?: Logger;
  /** Extra kafkajs client configuration (ssl, sasl, connectionTimeout…), merged over Conveyor's. */
  config?: Partial<KafkaConfig>;
}

type KafkajsModule = typeof import("kafkajs");

let loaded: Promise<KafkajsModule> | null = null;

/** kafkajs, loaded once; a clear error when it is not installed. */
export function loadKafkajs(): Promise<KafkajsModule> {
  loaded ??= import("kafkajs").catch((error: unknown) => {
    loaded = null;
    throw new InvalidInputError(`Kafka support needs the kafkajs package: npm install kafkajs@2 (${(error as Error).message})`);
  });
  return loaded;
}

/** A kafkajs client with Conveyor's defaults: short connection retries (callers back off themselves). */
export async function openKafka(options: KafkaClientOptions): Promise<Kafka> {
  if (!Array.isArray(options.brokers) || options.brokers.length === 0) throw new InvalidInputError("a Kafka client needs { brokers: ['host:9092', …] }");
  const { Kafka: KafkaCtor, logLevel } = await loadKafkajs();
  const logger = options.logger;
  const bridge: logCreator =
    () =>
    ({ level, log }) => {
      if (!logger) return;
      const { message, ...fields } = log;
      if (level === logLevel.ERROR) logger.error({ kafka: fields }, `kafkajs: ${message}`);
      else if (level === logLevel.WARN) logger.warn({ kafka: fields }, `kafkajs: ${message}`);
    };
  return new KafkaCtor({
    clientId: options.clientId,
    brokers: options.brokers,
    logLevel: logger ? logLevel.WARN : logLevel.NOTHING,
    logCreator: bridge,
    connectionTimeout: 3_000,
    // kafkajs retries a failed request itself (5 times over ~30 s by default); Conveyor's callers
    // back off with their own jitter and report each failure, so a short inner retry is enough.
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 2_000 },
    ...options.config,
  });
}
