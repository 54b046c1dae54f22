/**
 * A registered job's payload schema appears in the OpenAPI document (through Standard JSON
 * Schema: zod, ArkType), and the whole document passes an independent OpenAPI 3.1 validator.
 */
import { Validator } from "@seriousme/openapi-schema-validator";
import { type } from "arktype";
import * as v from "valibot";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { createTestBackend } from "../../src/testing/index.js";
import { createServer } from "../../src/http/index.js";
import { defineJob } from "../../src/index.js";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
});

type Doc = {
  components: { schemas?: Record<string, { properties?: Record<string, unknown>; required?: string[] }> };
  "x-conveyor-job-payloads"?: Record<string, { $ref: string }>;
};

describe("payload schemas in the OpenAPI document", () => {
  it("documents each registered job whose schema library gives JSON Schema, and the document is valid OpenAPI", async () => {
    const backend = createTestBackend();
    const app = await createServer({
      backend,
      apiKeys: false,
      logger: false,
      jobs: [
        defineJob("send-mail", z.object({ to: z.email(), tries: z.number().int().min(1).default(3) })),
        defineJob("billing:charge", type({ cents: "number.integer > 0", "note?": "string" })),
        // valibot 1.x does not implement Standard JSON Schema: validated, not documented.
        defineJob("resize", v.object({ width: v.number() })),
      ],
    });
    closers.push(async () => {
      await app.close();
      await backend.close();
    });
    const doc = (await app.inject({ method: "GET", url: "/v1/openapi.json" })).json<Doc>();
    const schemas = doc.components.schemas ?? {};
    expect(Object.keys(schemas).sort()).toEqual(["JobPayload.billing_charge", "JobPayload.send-mail"]);
    expect(schemas["JobPayload.send-mail"]).toMatchObject({ properties: { to: { type: "string", format: "email" } }, required: ["to"] });
    expect(schemas["JobPayload.billing_charge"]).toMatchObject({ properties: { cents: { type: "integer" } }, required: ["cents"] });
    expect(doc["x-conveyor-job-payloads"]).toEqual({
      "send-mail": { $ref: "#/components/schemas/JobPayload.send-mail" },
      "billing:charge": { $ref: "#/components/schemas/JobPayload.billing_charge" },
    });

    const validator = new Validator();
    const specification: Parameters<Validator["validate"]>[0] = JSON.parse(JSON.stringify(doc)) as Parameters<Validator["validate"]>[0];
    const result = await validator.validate(specification);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
  });
});
