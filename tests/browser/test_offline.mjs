// The release archive read as a reader reads it, offline, from file:// (make check-dist):
//   node tests/browser/test_offline.mjs <unpacked html dir>
// Opens the intro, the scorecard and every chapter page from file:// in Chromium with every request
// that is not a local file refused. Fails if a page asks for anything else, raises a script error
// (other than sphinx-thebe's known harmless one), leaves a slider figure undrawn or its math
// unrendered, or if the PDF the pages link to is not inside the archive.
import { access, readdir } from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { HARMLESS, launchChromium } from "../../tools/browser.mjs";

if (process.argv.length !== 3) {
  throw new Error("usage: node tests/browser/test_offline.mjs <unpacked html dir>");
}
const root = path.resolve(process.argv[2]);
const chapters = (await readdir(path.join(root, "notebooks"))).filter((f) => f.endsWith(".html"));
const pages = ["index.html", "book/intro.html", "book/scorecard.html", ...chapters.map((f) => `notebooks/${f}`)];
const failures = [];
const fail = (page, message) => failures.push(`${page}: ${message}`);

await access(path.join(root, "lengthgen-lite.pdf")).catch(() => fail("archive", "no lengthgen-lite.pdf at its root"));
const browser = await launchChromium();
for (const name of pages) {
  const page = await browser.context.newPage();
  const url = pathToFileURL(path.join(root, name)).href;
  await page.route("**/*", (route) =>
    route.request().url().startsWith("file:") ? route.continue() : (fail(name, `asked for ${route.request().url()}`), route.abort()),
  );
  page.on("pageerror", (error) => error.message.includes(HARMLESS) || fail(name, `script error: ${error.message}`));
  await page.goto(url, { waitUntil: "load" });
  const sliders = await page.locator(".lengthgen-slider").count();
  for (let i = 0; i < sliders; i++) {
    const drawn = page.locator(".lengthgen-slider").nth(i).locator(".main-svg").first();
    await drawn.waitFor({ timeout: 30000 }).catch(() => fail(name, `slider figure ${i + 1} of ${sliders} not drawn`));
  }
  if ((await page.locator(".math").count()) > 0) {
    await page.locator("mjx-container").first().waitFor({ state: "attached", timeout: 30000 }).catch(() => fail(name, "math not rendered"));
  }
  console.log(`${name}: opened from file://, ${sliders} slider figure(s) drawn`);
  await page.close();
}
await browser.close();
if (failures.length) {
  console.error(`FAILED offline check:\n${failures.join("\n")}`);
  process.exit(1);
}
console.log(`the archive reads offline: ${pages.length} pages from file://, nothing fetched`);
