/**
 * vitest globalSetup: the Kafka-protocol test broker shared by every test file that needs one.
 *
 * With KAFKA_URL set (`kafka://host:port,…`), tests use that cluster (each test under its own
 * topic and group names). Otherwise librdkafka's mock cluster is started through Debian's `kcat`
 * (testkit/servers/kafka.ts): a test broker in memory, NOT Kafka. Tests read the URL with
 * `inject("kafkaUrl")`; tests that kill the broker start private clusters.
 *
 * When neither is possible, the other tests still run: `kafkaUrl` is empty and `kafkaUnavailable`
 * says why, for the Kafka tests to report.
 */
import type { TestProject } from "vitest/node";
import { findKcat, startMockKafka } from "../../testkit/servers/kafka.js";
import { provideSharedServer } from "./shared-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The Kafka-protocol cluster tests use (`kafka://host:port,…`); "" when none is available. */
    kafkaUrl: string;
    /** Why there is none ("" when there is one). */
    kafkaUnavailable: string;
  }
}

export default function setup(project: TestProject): Promise<() => Promise<void>> {
  return provideSharedServer(project, {
    envVar: "KAFKA_URL",
    urlKey: "kafkaUrl",
    unavailableKey: "kafkaUnavailable",
    installed: () => findKcat() !== null,
    missing: "no Kafka test broker: set KAFKA_URL, or install kcat (apt-get install kcat) for librdkafka's mock cluster",
    start: () => startMockKafka(),
  });
}
