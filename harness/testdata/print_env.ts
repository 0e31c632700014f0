// Prints the names of the variables in this process's environment, as JSON (harness/procs_test.ts).
console.log(JSON.stringify(Object.keys(Deno.env.toObject()).sort()));
