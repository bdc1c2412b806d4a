// The live path, run by `make test`: a chapter run in JupyterLab in a real browser.
//   node tests/browser/test_live.mjs <venv bin dir> <notebook> <screenshot dir>
// Starts the venv's JupyterLab on 127.0.0.1 (a free port, a random token, a scratch copy of the
// notebook and fresh Jupyter config/data/runtime folders, autosave off, so nothing in the
// repository is written), opens the notebook in headless Chromium, runs every cell, then moves each
// ipywidgets slider one step with the keyboard; the plotly figure under the sliders must change.
// Fails on any request to another host, any page error, any error output in a cell, or a figure
// that does not change. Saves the slider block before and after each move to <screenshot dir>.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { launchChromium, onlyOrigin } from "../../tools/browser.mjs";

if (process.argv.length !== 5 || !process.argv[3].endsWith(".ipynb")) {
  throw new Error("usage: node tests/browser/test_live.mjs <venv bin dir> <notebook.ipynb> <screenshot dir>");
}
const [bin, notebook, shots] = process.argv.slice(2).map((arg) => path.resolve(arg));
const RUN_TIMEOUT = 300_000;  // every cell of the chapter; it trains small models (about 40 s alone)
const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(0);
const failures = [];
const fail = (message) => failures.push(message);

async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// A scratch root holding only the notebook (at the same relative path) and Jupyter's own folders.
const scratch = await mkdtemp(path.join(os.tmpdir(), "lengthgen-live-"));
const relative = path.relative(process.cwd(), notebook).split(path.sep).join("/");
await mkdir(path.join(scratch, "root", path.dirname(relative)), { recursive: true });
await copyFile(notebook, path.join(scratch, "root", relative));
const settings = path.join(scratch, "config", "lab", "user-settings", "@jupyterlab");
const setting = async (plugin, values) => {
  await mkdir(path.join(settings, path.dirname(plugin)), { recursive: true });
  await writeFile(path.join(settings, `${plugin}.jupyterlab-settings`), JSON.stringify(values));
};
await setting("docmanager-extension/plugin", { autosave: false });
await setting("apputils-extension/notification", { fetchNews: "false", checkForUpdates: false });

const [port, token] = [await freePort(), randomBytes(16).toString("hex")];
const origin = `http://127.0.0.1:${port}`;
const lab = spawn(path.join(bin, "jupyter"), [
  "lab", "--ip", "127.0.0.1", "--port", String(port), "--ServerApp.port_retries=0", "--no-browser",
  `--ServerApp.token=${token}`, `--ServerApp.root_dir=${path.join(scratch, "root")}`,
  "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
  ...(process.getuid?.() === 0 ? ["--allow-root"] : []),
], {
  env: {
    ...process.env, JUPYTER_CONFIG_DIR: path.join(scratch, "config"), JUPYTER_DATA_DIR: path.join(scratch, "data"),
    JUPYTER_RUNTIME_DIR: path.join(scratch, "runtime"), IPYTHONDIR: path.join(scratch, "ipython"),
    OMP_NUM_THREADS: "1", MKL_NUM_THREADS: "1",
  },
  stdio: ["ignore", "pipe", "pipe"],
});
const labLog = [];
lab.stdout.on("data", (chunk) => labLog.push(chunk.toString()));
lab.stderr.on("data", (chunk) => labLog.push(chunk.toString()));
const labExited = new Promise((resolve) => lab.on("exit", resolve));

async function waitForServer() {
  for (let tries = 0; tries < 240; tries++) {
    try {
      if ((await fetch(`${origin}/api/status?token=${token}`)).ok) return;
    } catch { /* not listening yet */ }
    if (lab.exitCode !== null) throw new Error(`JupyterLab exited (${lab.exitCode})`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error("JupyterLab did not answer within 60 s");
}

// The plotly graph under the sliders (redrawn as a new element at each move): its data and drawing.
const figureState = (block) => {
  const gd = block.querySelector(".js-plotly-plot");
  return gd ? JSON.stringify(gd.data) + gd.querySelector(".main-svg")?.innerHTML : null;
};

const browser = await launchChromium({ width: 1400, height: 1000 });
try {
  await waitForServer();
  console.log(`JupyterLab up on ${origin} after ${seconds()} s`);
  const page = await browser.context.newPage();
  page.on("pageerror", (error) => fail(`page error: ${error.message}`));
  await onlyOrigin(page, origin, (url) => fail(`requested another host: ${url}`));
  await page.goto(`${origin}/lab/tree/${relative}?token=${token}`, { waitUntil: "load" });
  await page.waitForFunction(() => {
    const panel = window.jupyterapp?.shell.currentWidget;
    return panel?.content?.widgets?.length && panel.sessionContext?.session?.kernel?.status === "idle";
  }, null, { timeout: 120_000 });
  console.log(`notebook open, kernel idle after ${seconds()} s`);

  // JupyterLab's own Run All; its promise settles when the last cell has run.
  const ran = await page.evaluate(
    (timeout) => Promise.race([
      window.jupyterapp.commands.execute("notebook:run-all-cells"),
      new Promise((resolve) => setTimeout(() => resolve("timeout"), timeout)),
    ]),
    RUN_TIMEOUT,
  );
  if (ran === "timeout") fail(`run all cells did not finish within ${RUN_TIMEOUT / 1000} s`);
  else if (ran !== true) fail(`run all cells stopped early (JupyterLab returned ${JSON.stringify(ran)})`);
  const cells = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets
    .filter((cell) => cell.model.type === "code")
    .map((cell, i) => ({ i, count: cell.model.executionCount, outputs: cell.model.outputs.toJSON() })));
  for (const cell of cells) {
    if (cell.count === null) fail(`code cell ${cell.i} did not run`);
    for (const out of cell.outputs) {
      if (out.output_type === "error") fail(`code cell ${cell.i}: ${out.ename}: ${out.evalue}`);
    }
  }
  console.log(`ran ${cells.length} code cells in ${seconds()} s (since start)`);

  // The live slider block: an ipywidgets box holding sliders and the figure.
  const block = page.locator(".jp-OutputArea-output .widget-vbox").filter({ has: page.locator(".widget-slider") })
    .filter({ has: page.locator(".js-plotly-plot") });
  if ((await block.count()) !== 1) throw new Error(`expected one live slider block, found ${await block.count()}`);
  await block.scrollIntoViewIfNeeded();
  await mkdir(shots, { recursive: true });
  await block.screenshot({ path: path.join(shots, "live-ch2-before.png") });
  const handles = block.locator(".widget-slider .noUi-handle");
  const count = await handles.count();
  if (count === 0) fail("no slider handle in the live block");
  for (let i = 0; i < count; i++) {
    const before = await block.evaluate(figureState);
    const label = (await block.locator(".widget-slider .widget-label").nth(i).textContent()).trim();
    await handles.nth(i).focus();
    await page.keyboard.press("ArrowRight");
    // The kernel redraws (an Output widget swaps in a new figure): wait up to 30 s for the change.
    let after = await block.evaluate(figureState);
    for (let tries = 0; tries < 120 && (after === before || after === null); tries++) {
      await page.waitForTimeout(250);
      after = await block.evaluate(figureState);
    }
    if (after === before || after === null) fail(`moving slider ${label} with the keyboard did not change the figure`);
    await block.screenshot({ path: path.join(shots, `live-ch2-after-${label || i}.png`) });
    console.log(`slider ${label}: figure changed (${seconds()} s)`);
  }
  const errors = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets
    .flatMap((cell) => (cell.model.type === "code" ? cell.model.outputs.toJSON() : []))
    .filter((out) => out.output_type === "error").length);
  if (errors) fail(`${errors} error output(s) after moving the sliders`);
} catch (error) {
  fail(error.message);
} finally {
  await browser.close();
  lab.kill("SIGTERM");
  await Promise.race([labExited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
  if (lab.exitCode === null) lab.kill("SIGKILL");
  await rm(scratch, { recursive: true, force: true });
}

if (failures.length) {
  console.log(`JupyterLab log:\n${labLog.join("").split("\n").slice(-40).join("\n")}`);
  console.log(`live test FAILED:\n  ${failures.join("\n  ")}`);
  process.exitCode = 1;
} else {
  console.log(`live test passed in ${seconds()} s; screenshots in ${shots}`);
}
