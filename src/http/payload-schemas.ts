/**
 * The JSON Schemas of registered jobs' payloads, for the OpenAPI document: taken from the payload
 * schema through Standard JSON Schema (`schema["~standard"].jsonSchema.input(...)`, which zod 4.2+
 * and ArkType 2.1+ implement), the schema of what a client sends (the input, before defaults and
 * transforms). A library without it (valibot 1.x) or a schema that cannot be expressed (a
 * refinement, a transform to a Date) leaves that job out; the enqueue route still validates it.
 */
import type { JobDefinition } from "../core/define.js";

type JsonObject = Record<string, unknown>;

interface StandardJsonSchemaProps {
  jsonSchema?: { input?: (options: { target: string }) => JsonObject };
}

/** Job name -> JSON Schema of its payload, for the jobs whose schema library can say it. */
export function payloadJsonSchemas(jobs: ReadonlyMap<string, JobDefinition<unknown>>): Map<string, JsonObject> {
  const out = new Map<string, JsonObject>();
  for (const [name, definition] of jobs) {
    const props = definition.schema["~standard"] as StandardJsonSchemaProps;
    const input = props.jsonSchema?.input;
    if (typeof input !== "function") continue;
    try {
      // OpenAPI 3.1 schemas are JSON Schema 2020-12; the document states that once, not per schema.
      const { $schema: _dialect, ...schema } = input({ target: "draft-2020-12" });
      out.set(name, schema);
    } catch {
      // Not expressible as JSON Schema: documented without it.
    }
  }
  return out;
}

/** A component name OpenAPI accepts (`^[a-zA-Z0-9._-]+$`) for a job name (which may hold `:` and `/`). */
export function payloadComponentName(jobName: string): string {
  return `JobPayload.${jobName.replace(/[^A-Za-z0-9._-]/g, "_")}`;
}
