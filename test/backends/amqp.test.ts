/**
 * The conformance suite on RabbitMQ (the shared throwaway broker), each store under a queue
 * prefix of its own. What a broker cannot do is declared in the backend's capabilities and the tests
 * needing it are skipped by name ("[needs jobRecords]", …); docs/amqp.md says why each is missing.
 */
import { afterAll, inject } from "vitest";
import { AmqpBackend } from "../../src/backend/amqp/index.js";
import type { Capabilities } from "../../src/backend/contract.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { deleteBackendQueues, rabbitName, requireRabbit } from "../helpers/rabbitmq.js";

const url = requireRabbit(inject("rabbitmqUrl"), inject("rabbitmqUnavailable"));

// The backend's own declaration, from an instance that never connects (constructors open
// nothing). The suite checks it against behaviour (checks.ts: a declared feature works, a
// lacking one is refused; tests chosen by it fail when it says more than the store does).
const capabilities: Capabilities = new AmqpBackend({ url, prefix: "capabilities", logger: silentLogger }).capabilities;

const made: AmqpBackend[] = [];
let prefix: string | undefined;
afterAll(async () => {
  for (const b of made) await deleteBackendQueues(url, b);
});

function open(clock: FakeClock): Promise<AmqpBackend> {
  // claimWaitMs: the suite claims right after enqueueing; give the broker's push a moment.
  // prefetch: the suite's claimers hold many unsettled jobs at once and claim again, where a
  // Worker holds at most its first claim's limit (the default prefetch).
  const b = new AmqpBackend({ url, prefix: prefix!, clock, logger: silentLogger, claimWaitMs: 300, prefetch: 1_000 });
  made.push(b);
  return b.migrate().then(() => b);
}

backendSuite("rabbitmq (quorum queues)", {
  capabilities,
  make(clock) {
    prefix = rabbitName("conf");
    return open(clock);
  },
  openSecond(clock) {
    if (!prefix) throw new Error("openSecond called before make");
    return open(clock);
  },
});
