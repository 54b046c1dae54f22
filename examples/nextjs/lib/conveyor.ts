/**
 * The Conveyor objects a Next.js app shares between its route handlers: one backend and one queue
 * per server process. They live on globalThis because `next dev` re-evaluates modules on every
 * change, and a new connection pool per edit would exhaust the database. Route handlers run on the
 * Node.js runtime (the default); the worker is a separate process (`conveyor worker`), never a
 * route handler, since serverless functions are frozen between requests.
 */
import { defineJob, Queue, type Backend } from "conveyor-jobs";
import { PostgresBackend } from "conveyor-jobs/postgres";
import { SqliteBackend } from "conveyor-jobs/sqlite";
import { z } from "zod";

export const sendWelcome = defineJob<{ userId: string }, { sent: boolean }>("send-welcome", z.object({ userId: z.string().min(1) }));

interface Shared {
  backend: Backend;
  queue: Queue;
}

const holder = globalThis as typeof globalThis & { conveyorShared?: Shared };

/** The process's queue: PostgreSQL when DATABASE_URL is set (production), else a SQLite file. */
export function conveyor(): Shared {
  if (!holder.conveyorShared) {
    const backend: Backend = process.env.DATABASE_URL
      ? new PostgresBackend({ connectionString: process.env.DATABASE_URL })
      : new SqliteBackend({ path: process.env.CONVEYOR_SQLITE_PATH ?? ".tmp/nextjs.db" });
    holder.conveyorShared = { backend, queue: new Queue("email", { backend }) };
  }
  return holder.conveyorShared;
}
