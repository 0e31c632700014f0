import type { Planner } from "../model/planner.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";

/** A planner answering `answers` in turn (the last one again when they run out), recording each request. */
export function scripted(answers: PlannerDecision[]): { model: Planner; asked: DecideRequest[] } {
  const asked: DecideRequest[] = [];
  const model: Planner = {
    describe: "script",
    decide: (req) => {
      asked.push(req);
      return Promise.resolve(answers[Math.min(asked.length - 1, answers.length - 1)]);
    },
  };
  return { model, asked };
}
