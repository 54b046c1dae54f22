/**
 * The whole conformance suite on PostgreSQL with the schema's event log off (eventLog: false,
 * migration 0011): every contract but the event log holds without the event triggers, and the
 * event log's readers refuse by name (test/conformance/events.ts, "[no eventLog]").
 */
import pg from "pg";
import { afterAll, afterEach, inject } from "vitest";
import type { Backend, SqlClient } from "../../src/backend/contract.js";
import { FULL_STORE_FEATURES } from "../../src/backend/contract.js";
import { PostgresBackend } from "../../src/backend/postgres/backend.js";
import type { FakeClock } from "../../src/core/clock.js";
import { silentLogger } from "../../src/core/logger.js";
import { backendSuite } from "../conformance/suite.js";
import { requireDatabase, TestSchemas } from "../helpers/postgres.js";

const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
const schemas = new TestSchemas(url);
const admin = new pg.Pool({ connectionString: url, max: 2 });

afterEach(() => schemas.dropAll());
afterAll(() => admin.end());

let current: string | undefined;

function currentSchema(): string {
  if (!current) throw new Error("no store yet: make() has not run");
  return current;
}

async function open(schema: string, clock: FakeClock): Promise<Backend> {
  const backend = new PostgresBackend({ connectionString: url, schema, clock, logger: silentLogger, poolSize: 4, eventLog: false });
  await backend.migrate();
  return backend;
}

backendSuite("postgres, event log off", {
  capabilities: {
    ...FULL_STORE_FEATURES,
    transactionalEnqueue: true,
    transactionalCompletion: true,
    crossProcessWakeups: true,
    multiProcess: true,
    claimAcrossQueues: "merged",
    flows: "across-queues" as const,
    eventLog: false,
    jobFlowKeys: true,
    completeAndClaim: true,
    claimMarksBuffered: true,
  },
  make: (clock) => {
    current = schemas.create("evoffc");
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
