/**
 * The conformance suite on the Kafka backend, against librdkafka's mock cluster started by kcat
 * (a Kafka-protocol TEST BROKER, not Kafka), each store under a topic prefix and consumer group of
 * its own. What a log cannot do is declared in the backend's capabilities and the tests needing it
 * are skipped by name ("[needs jobRecords]", …); docs/kafka.md says why each is missing.
 *
 * Most of the wall time is the mock's group timing: a consumer group's first join waits ~3 s
 * (group.initial.rebalance.delay), once per store that claims and once per dead-letter view.
 */
import { inject } from "vitest";
import { KafkaBackend } from "../../src/backend/kafka/index.js";
import type { Capabilities } from "../../src/backend/contract.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { kafkaName, requireKafka } from "../helpers/kafka.js";

const url = requireKafka(inject("kafkaUrl"), inject("kafkaUnavailable"));

// The backend's own declaration, from an instance that never connects (constructors open
// nothing). The suite checks it against behaviour (checks.ts: a declared feature works, a
// lacking one is refused; tests chosen by it fail when it says more than the store does).
const capabilities: Capabilities = new KafkaBackend({ url, prefix: "capabilities", logger: silentLogger }).capabilities;

let prefix: string | undefined;

function open(clock: FakeClock): Promise<KafkaBackend> {
  // claimWaitMs: the suite claims right after enqueueing; give the fetch a moment.
  // Short heartbeats: a second store's join is a rebalance the first must answer.
  const b = new KafkaBackend({
    url,
    prefix: prefix!,
    clock,
    logger: silentLogger,
    claimWaitMs: 300,
    heartbeatIntervalMs: 200,
    sessionTimeoutMs: 6_000,
    fetchMaxWaitMs: 100,
  });
  return b.migrate().then(() => b);
}

backendSuite("kafka (mock broker, not Kafka)", {
  capabilities,
  make(clock) {
    prefix = kafkaName("conf").replace(/-/g, "_");
    return open(clock);
  },
  openSecond(clock) {
    if (!prefix) throw new Error("openSecond called before make");
    return open(clock);
  },
});
