import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { UsageError } from "./args.js";

/**
 * The queues a handlers module says it serves: its optional named export `queues` (a name or an
 * array of names). Handlers are keyed by job name, and a job name is not tied to a queue (any
 * queue may carry a "welcome" job), so without `--queue` this export is the only place the
 * queues can come from. Call it after `loadHandlers`, which has loaded the module (and tsx for a
 * TypeScript file): this import then returns the cached module.
 */
export async function handlerModuleQueues(modulePath: string): Promise<string[] | null> {
  const mod = (await import(pathToFileURL(resolve(modulePath)).href)) as { queues?: unknown };
  if (mod.queues === undefined) return null;
  const list = typeof mod.queues === "string" ? [mod.queues] : mod.queues;
  if (!Array.isArray(list) || list.length === 0 || !list.every((q) => typeof q === "string" && q !== "")) {
    throw new UsageError(`--handlers ${modulePath}: its "queues" export must be a queue name or a non-empty array of names`);
  }
  return list as string[];
}

/** `--queue` when given, else the module's `queues` export, else a usage error that says both ways. */
export async function queuesForHandlers(option: unknown, modulePath: string): Promise<string[]> {
  if (option !== undefined) {
    if (typeof option !== "string" || option.trim() === "") throw new UsageError("--queue needs a queue name");
    return option
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
  }
  const named = await handlerModuleQueues(modulePath);
  if (named) return named;
  throw new UsageError(
    `which queues? ${modulePath} maps job names to handlers, and a job name is not tied to a queue: ` +
      `pass --queue NAME[,NAME], or add \`export const queues = ["NAME"]\` to the module`,
  );
}
