// Runs a MicroPython program under the MicroPython WebAssembly port (npm @micropython/micropython-webassembly-pyscript):
//   node run.mjs <package dir> <program.py> [<file to place at /name> ...]
// Files given after the program are written into MicroPython's filesystem root under their base names, so the
// program can import them. Everything the program prints goes to stdout; an uncaught exception ends with "ERROR ...".
import { readFileSync } from "fs";
import { basename, join } from "path";
import { pathToFileURL } from "url";

const [, , packageDir, programPath, ...files] = process.argv;
const { loadMicroPython } = await import(pathToFileURL(join(packageDir, "micropython.mjs")).href);
let out = "";
const mp = await loadMicroPython({ stdout: (line) => { out += line + "\n"; }, stderr: (line) => { out += line + "\n"; } });
for (const file of files) mp.FS.writeFile("/" + basename(file), readFileSync(file));
try {
  mp.runPython(readFileSync(programPath, "utf8"));
} catch (error) {
  out += "ERROR " + error.message + "\n";
}
process.stdout.write(out);
