/**
 * The conformance suite on PostgreSQL, one schema per test, for the files that run it
 * (postgres.test.ts with the defaults, postgres-event-log-off-conformance.test.ts with the event
 * log off): the store, a second connection to it, and the transactional-completion probe.
 */
import pg from "pg";
import { afterAll, afterEach, inject } from "vitest";
import type { Backend, Capabilities, SqlClient } from "../../src/backend/contract.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { requireDatabase, TestSchemas } from "./postgres.js";

/** PostgresBackend's capabilities with the event log on (`eventLog` false turns that one off). */
export function postgresCapabilities(eventLog = true): Capabilities {
  return {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: true,
    transactionalCompletion: true,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog,
    jobFlowKeys: true,
    completeAndClaim: true,
    claimMarksBuffered: true,
  };
}

/** Registers the conformance suite as `name` on PostgreSQL; call once per test file. */
export function postgresConformance(name: string, options: { eventLog?: boolean; schemaPrefix?: string } = {}): void {
  const eventLog = options.eventLog ?? true;
  const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
  const schemas = new TestSchemas(url);
  // Outside any backend: creates and reads the transactional-completion probe's table.
  const admin = new pg.Pool({ connectionString: url, max: 2 });

  // The suite closes each test's backends in its own afterEach, which runs before this one.
  afterEach(() => schemas.dropAll());
  afterAll(() => admin.end());

  /** The schema of the current test's store, for openSecond and the probe. */
  let current: string | undefined;
  const currentSchema = (): string => {
    if (!current) throw new Error("no store yet: make() has not run");
    return current;
  };
  const open = async (schema: string, clock: FakeClock): Promise<Backend> => {
    const backend = new PostgresBackend({ connectionString: url, schema, clock, logger: silentLogger, poolSize: 4, eventLog });
    await backend.migrate();
    return backend;
  };

  backendSuite(name, {
    capabilities: postgresCapabilities(eventLog),
    make: (clock) => {
      current = schemas.create(options.schemaPrefix);
      return open(current, clock);
    },
    openSecond: (clock) => open(currentSchema(), clock),
    completionProbe: {
      async setup() {
        await admin.query(`CREATE TABLE ${pg.escapeIdentifier(currentSchema())}.markers (marker text NOT NULL)`);
      },
      async write(client: SqlClient, marker: string) {
        await client.query(`INSERT INTO ${pg.escapeIdentifier(currentSchema())}.markers (marker) VALUES ($1)`, [marker]);
      },
      async read() {
        const { rows } = await admin.query<{ marker: string }>(`SELECT marker FROM ${pg.escapeIdentifier(currentSchema())}.markers ORDER BY marker`);
        return rows.map((r) => r.marker);
      },
    },
  });
}
