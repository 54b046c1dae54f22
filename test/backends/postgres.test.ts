import pg from "pg";
import { afterAll, afterEach, inject } from "vitest";
import type { Backend, SqlClient } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
// Outside any backend: creates and reads the transactional-completion probe's table.
const admin = new pg.Pool({ connectionString: url, max: 2 });

// The suite closes each test's backends in its own afterEach, which runs before this one.
afterEach(() => schemas.dropAll());
afterAll(() => admin.end());

/** The schema of the current test's store, for openSecond and the probe. */
let current: string | undefined;

function currentSchema(): string {
  if (!current) throw new Error("no store yet: make() has not run");
  return current;
}

async function open(schema: string, clock: FakeClock): Promise<Backend> {
  const backend = new PostgresBackend({ connectionString: url, schema, clock, logger: silentLogger, poolSize: 4 });
  await backend.migrate();
  return backend;
}

async function make(clock: FakeClock): Promise<Backend> {
  current = schemas.create();
  return open(current, clock);
}

backendSuite("postgres", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: true,
    transactionalCompletion: true,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: true,
    jobFlowKeys: true,
    completeAndClaim: true,
    claimMarksBuffered: true,
  },
  make,
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
