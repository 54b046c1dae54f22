/**
 * The OpenAPI 3.1 document, generated from the route table: the same schema objects the
 * validator checks requests against, so documentation and behaviour cannot disagree.
 */
import type { RouteSpec } from "./context.js";
import type { JsonSchema } from "./schema.js";
import { payloadComponentName } from "./payload-schemas.js";

export interface OpenApiInfo {
  title?: string;
  version?: string;
  description?: string;
}

type Json = Record<string, unknown>;

/**
 * A copy of `schema` in which every object states `additionalProperties`: `true` where the
 * schema left it out (JSON Schema's default, and what the server's validator does). Generators
 * such as openapi-typescript read a missing one as "no other properties", so an object given
 * without properties (a job's `meta`) would become a type that refuses what the server accepts.
 */
export function explicitObjects(schema: JsonSchema): JsonSchema {
  const out: JsonSchema = { ...schema };
  const types = Array.isArray(schema.type) ? schema.type : schema.type === undefined ? [] : [schema.type];
  if ((types.includes("object") || schema.properties !== undefined) && schema.additionalProperties === undefined) {
    out.additionalProperties = true;
  }
  if (schema.properties) out.properties = Object.fromEntries(Object.entries(schema.properties).map(([k, v]) => [k, explicitObjects(v)]));
  if (schema.items) out.items = explicitObjects(schema.items);
  if (schema.anyOf) out.anyOf = schema.anyOf.map(explicitObjects);
  if (typeof schema.additionalProperties === "object") out.additionalProperties = explicitObjects(schema.additionalProperties);
  return out;
}

function parameters(route: RouteSpec): Json[] {
  const out: Json[] = [];
  const add = (where: "path" | "query" | "header", schema: JsonSchema | undefined) => {
    if (!schema?.properties) return;
    const required = new Set(schema.required ?? []);
    for (const [name, s] of Object.entries(schema.properties)) {
      out.push({
        name: where === "header" ? headerCase(name) : name,
        in: where,
        required: where === "path" || required.has(name),
        ...(s.description ? { description: s.description } : {}),
        schema: explicitObjects(s),
      });
    }
  };
  add("path", route.schema.params);
  add("query", route.schema.querystring);
  add("header", route.schema.headers);
  return out;
}

function headerCase(name: string): string {
  return name.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());
}

/**
 * Builds the document. `servers` default to the base path on the current origin. `payloads`:
 * job name -> JSON Schema of its payload (registered jobs), as `components.schemas` named
 * `JobPayload.<name>` and listed by job name under `x-conveyor-job-payloads`.
 */
export function buildOpenApi(routes: readonly RouteSpec[], basePath: string, info: OpenApiInfo = {}, payloads: ReadonlyMap<string, Json> = new Map()): Json {
  const paths: Record<string, Json> = {};
  for (const route of routes) {
    const path = route.url.replace(/:([A-Za-z_]+)/g, "{$1}");
    const item = (paths[path] ??= {});
    const security = route.access === "public" ? [] : route.access === "events" ? [{ apiKey: ["read"] }, { streamToken: [] }] : [{ apiKey: [route.access] }];
    const responses: Json = {};
    for (const [code, r] of Object.entries(route.responses)) {
      responses[code] = {
        description: r.description,
        ...(r.headers ? { headers: Object.fromEntries(Object.entries(r.headers).map(([h, v]) => [h, { description: v.description, schema: v.schema }])) } : {}),
        ...(r.schema ? { content: { [r.contentType ?? "application/json"]: { schema: explicitObjects(r.schema) } } } : {}),
      };
    }
    item[route.method.toLowerCase()] = {
      operationId: route.operationId,
      summary: route.summary,
      ...(route.description ? { description: route.description } : {}),
      tags: route.tags,
      security,
      ...(parameters(route).length ? { parameters: parameters(route) } : {}),
      ...(route.schema.body ? { requestBody: { required: true, content: { "application/json": { schema: explicitObjects(route.schema.body) } } } } : {}),
      responses,
      ...(route.access !== "public" && route.access !== "events" ? { "x-required-scope": route.access } : {}),
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      title: info.title ?? "Conveyor",
      version: info.version ?? "1",
      description:
        info.description ??
        "Durable background jobs over HTTP: enqueue answers 202 Accepted with where to follow the job (poll or Server-Sent Events); optional signed webhooks when it finishes.",
    },
    servers: [{ url: basePath || "/" }],
    ...(payloads.size > 0
      ? {
          "x-conveyor-job-payloads": Object.fromEntries(
            [...payloads.keys()].map((name) => [name, { $ref: `#/components/schemas/${payloadComponentName(name)}` }]),
          ),
        }
      : {}),
    components: {
      ...(payloads.size > 0
        ? {
            schemas: Object.fromEntries(
              [...payloads].map(([name, schema]) => [
                payloadComponentName(name),
                { description: `The payload (\`data\`) of job "${name}", from its registered schema.`, ...schema },
              ]),
            ),
          }
        : {}),
      securitySchemes: {
        apiKey: {
          type: "http",
          scheme: "bearer",
          description: "An API key: Authorization: Bearer <key> (X-API-Key also works). Scopes: enqueue, read, admin (admin includes the others).",
        },
        streamToken: {
          type: "apiKey",
          in: "query",
          name: "access_token",
          description: "A job-scoped token from POST /jobs/{id}/events/token, for the events stream only (browsers' EventSource cannot send headers).",
        },
      },
    },
    paths,
  };
}
