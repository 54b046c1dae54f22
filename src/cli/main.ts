import { ConveyorError } from "../core/errors.js";
import { UsageError } from "./args.js";
import { packageVersion } from "./version.js";

const COMMANDS: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number>; help: string }> }> = {
  worker: { summary: "run jobs until SIGTERM", load: () => import("./worker.js") },
  serve: { summary: "HTTP API (202 enqueue, status, SSE, webhooks); --handlers also runs jobs", load: () => import("./serve.js") },
  enqueue: { summary: "add one job or many", load: () => import("./enqueue.js") },
  stats: { summary: "jobs per state and oldest waiting age, per queue", load: () => import("./stats.js") },
  jobs: { summary: "list, show or cancel jobs", load: () => import("./jobs.js") },
  dlq: { summary: "inspect and replay dead jobs", load: () => import("./dlq.js") },
  schedules: { summary: "list, add or remove cron schedules", load: () => import("./schedules.js") },
  relay: { summary: "publish transactional outbox events to RabbitMQ, Redis Streams, webhooks or a queue", load: () => import("./relay.js") },
  migrate: { summary: "create or upgrade the schema", load: () => import("./migrate.js") },
};

const DB_URLS = `--db URL (default: the CONVEYOR_DB environment variable) is one of:
  sqlite:PATH[?eventLog=off]                    an SQLite file (created and migrated on first use; event log default on)
  postgres://USER:PASS@HOST/DB[?schema=NAME&eventLog=off]    PostgreSQL (schema default: conveyor; event log default on)
  redis://[:PASS@]HOST:PORT[/DB][?prefix=NAME&eventLog=off]  Redis with maxmemory-policy noeviction (prefix default: conveyor; event log default on)`;

const USAGE = `conveyor — durable background jobs

Usage: conveyor <command> [options]     (conveyor <command> --help for details)

${Object.entries(COMMANDS)
  .map(([name, c]) => `  ${name.padEnd(9)} ${c.summary}`)
  .join("\n")}

${DB_URLS}

conveyor --version prints the installed version.`;

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    console.log(USAGE);
    return name ? 0 : 2;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    console.log(packageVersion());
    return 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    console.error(`unknown command "${name}"\n\n${USAGE}`);
    return 2;
  }
  const mod = await command.load();
  // Every command's --help ends with the store URLs, so no help can fall behind what --db takes.
  if (rest.includes("--help") || rest.includes("-h")) {
    console.log(`${mod.help}\n\n${DB_URLS}`);
    return 0;
  }
  try {
    return await mod.run(rest);
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`conveyor ${name}: ${error.message}\n\n${mod.help}`);
      return 2;
    }
    if (error instanceof ConveyorError) {
      console.error(`conveyor ${name}: ${error.message}`);
      return 1;
    }
    throw error;
  }
}
