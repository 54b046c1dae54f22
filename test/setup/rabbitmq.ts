/**
 * vitest globalSetup: the RabbitMQ broker shared by every test file that needs one.
 *
 * With RABBITMQ_URL set, tests use that broker (each test under its own queue and exchange
 * names). Otherwise a throwaway node is started (test/helpers/rabbitmq.ts) once per test run —
 * RabbitMQ takes seconds to boot — and removed after. Tests read the URL with
 * `inject("rabbitmqUrl")`; tests that stop or kill a broker start private ones.
 *
 * When neither is possible, the other tests still run: `rabbitmqUrl` is empty and
 * `rabbitmqUnavailable` says why, for the RabbitMQ tests to report.
 */
import type { TestProject } from "vitest/node";
import { findRabbitServer, startThrowawayRabbit } from "../helpers/rabbitmq.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The RabbitMQ broker tests use; "" when none is available. */
    rabbitmqUrl: string;
    /** Why there is no RabbitMQ ("" when there is one). */
    rabbitmqUnavailable: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env.RABBITMQ_URL;
  if (given) {
    project.provide("rabbitmqUrl", given);
    project.provide("rabbitmqUnavailable", "");
    return async () => {};
  }
  if (findRabbitServer() === null) {
    project.provide("rabbitmqUrl", "");
    project.provide("rabbitmqUnavailable", "no RabbitMQ: set RABBITMQ_URL, or install rabbitmq-server (apt-get install rabbitmq-server)");
    return async () => {};
  }
  const server = await startThrowawayRabbit();
  project.provide("rabbitmqUrl", server.url);
  project.provide("rabbitmqUnavailable", "");
  return () => server.stop();
}
