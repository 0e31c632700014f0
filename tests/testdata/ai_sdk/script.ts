/**
 * The fake Anthropic model's script of the AI SDK tests.
 *
 * @module
 */

import type { AnthropicStep } from "../../../mock/anthropic.ts";

/** The Anthropic script of the tests: thinking, two tools at once, thinking, one tool, the answer. */
export const ANTHROPIC_STEPS: AnthropicStep[] = [
  {
    thinking: "The server and the database do not depend on each other: ask for both at once.",
    text: "Creating the server and the database.",
    tools: [
      { name: "create_server", input: { name: "web-1", spec: "small" } },
      { name: "create_database", input: { name: "db-1", engine: "postgres", size_gb: 10 } },
    ],
  },
  {
    thinking: "Both exist; the DNS record points at web-1.",
    tools: [{
      name: "create_dns_record",
      input: { hostname: "app.example.test", record_type: "CNAME", target: "web-1" },
    }],
  },
  { thinking: "All three are made.", text: "Provisioned web-1, db-1 and app.example.test." },
];
