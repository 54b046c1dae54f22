/**
 * vitest globalSetup: the RabbitMQ broker shared by every test file that needs one.
 *
 * With RABBITMQ_URL set, tests use that broker (each test under its own queue and exchange
 * names). Otherwise a throwaway node is started (testkit/servers/rabbitmq.ts) once per test run —
 * RabbitMQ takes seconds to boot — and removed after. Tests read the URL with
 * `inject("rabbitmqUrl")`; tests that stop or kill a broker start private ones.
 *
 * When neither is possible, the other tests still run: `rabbitmqUrl` is empty and
 * `rabbitmqUnavailable` says why, for the RabbitMQ tests to report.
 */
import type { TestProject } from "vitest/node";
import { findRabbitServer, startThrowawayRabbit } from "../../testkit/servers/rabbitmq.js";
import { provideSharedServer } from "./shared-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The RabbitMQ broker tests use; "" when none is available. */
    rabbitmqUrl: string;
    /** Why there is no RabbitMQ ("" when there is one). */
    rabbitmqUnavailable: string;
  }
}

export default function setup(project: TestProject): Promise<() => Promise<void>> {
  return provideSharedServer(project, {
    envVar: "RABBITMQ_URL",
    urlKey: "rabbitmqUrl",
    unavailableKey: "rabbitmqUnavailable",
    installed: () => findRabbitServer() !== null,
    missing: "no RabbitMQ: set RABBITMQ_URL, or install rabbitmq-server (apt-get install rabbitmq-server)",
    start: () => startThrowawayRabbit(),
  });
}
