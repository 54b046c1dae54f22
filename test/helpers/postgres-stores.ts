/**
 * A test file's PostgreSQL stores on the shared test server (test/setup/postgres.ts): each a
 * migrated PostgresBackend on a schema of its own, closed after its test and then its schema
 * dropped, so every file states only what is particular to it (pool size, clock, event log).
 *
 * Call once per file at its top level, before the file's own afterEach hooks: vitest runs
 * afterEach hooks last registered first, so a file's hook that stops its workers or child
 * processes runs before this one closes the backends they use.
 */
import pg from "pg";
import { afterAll, afterEach, inject } from "vitest";
import { PostgresBackend, type PostgresBackendOptions } from "../../src/backend/postgres/backend.js";
import { silentLogger } from "../../src/core/logger.js";
import { requireDatabase, TestSchemas } from "./postgres.js";

interface Closable {
  close(): Promise<unknown>;
}

export interface PostgresTestStores {
  /** The shared server's database URL. */
  readonly url: string;
  /** The file's schemas: every one named here is dropped after the test, once the backends are closed. */
  readonly schemas: TestSchemas;
  /** A pool for the test's own SQL (`adminConnections` connections), made on first use and ended after the file. */
  readonly admin: pg.Pool;
  /** A migrated backend with the file's defaults and `options`, on a fresh schema unless `options.schema` names one. */
  open(options?: Partial<PostgresBackendOptions>): Promise<PostgresBackend>;
  /** Closes `closable` (a worker, a subscription) after the test, before anything registered earlier; returns it. */
  readonly closeAfterTest: <T extends Closable>(closable: T) => T;
  /** Closes now, and no longer after the test, what `closeAfterTest` (or `open`) registered: e.g. workers a test stops midway. */
  readonly closeNow: (...closables: Closable[]) => Promise<void>;
}

export function postgresTestStores(
  defaults: Partial<PostgresBackendOptions> = {},
  options: {
    /** Connections of the `admin` pool; default 2. */
    adminConnections?: number;
    /** How the schemas made by `open` begin (see randomSchema); default "t". */
    schemaPrefix?: string;
  } = {},
): PostgresTestStores {
  const url = requireDatabase(inject("postgresUrl"), inject("postgresUnavailable"));
  const schemas = new TestSchemas(url);
  const toClose: Closable[] = [];
  let admin: pg.Pool | null = null;

  afterEach(async () => {
    // The latest first: a worker closes before the backend it was given.
    for (const c of toClose.splice(0).reverse()) await c.close();
    await schemas.dropAll();
  });
  afterAll(async () => {
    await admin?.end();
  });

  const closeAfterTest = <T extends Closable>(closable: T): T => {
    toClose.push(closable);
    return closable;
  };
  return {
    url,
    schemas,
    get admin() {
      admin ??= new pg.Pool({ connectionString: url, max: options.adminConnections ?? 2 });
      return admin;
    },
    async open(particular = {}) {
      const backend = new PostgresBackend({
        connectionString: url,
        logger: silentLogger,
        ...defaults,
        ...particular,
        schema: particular.schema ?? schemas.create(options.schemaPrefix),
      });
      closeAfterTest(backend);
      await backend.migrate();
      return backend;
    },
    closeAfterTest,
    async closeNow(...closables) {
      for (const c of closables) {
        const at = toClose.indexOf(c);
        if (at === -1) throw new Error("closeNow: not registered with closeAfterTest");
        toClose.splice(at, 1);
        await c.close();
      }
    },
  };
}
