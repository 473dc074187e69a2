// The frontend's devDependency "fs@0.0.1-security" is npm's security placeholder: nothing imports it
// (Node's built-in `fs` is what the code uses), and this registry's metadata for "fs" lists no
// versions, so `npm ci` fails with ETARGET after ~50 s. Drop it from package.json and the lock.
const fs = require('fs');
const dir = process.argv[2];
for (const [file, drop] of [
  ['package.json', (j) => delete j.devDependencies.fs],
  ['package-lock.json', (j) => { delete j.packages[''].devDependencies.fs; delete j.packages['node_modules/fs']; }],
]) {
  const path = `${dir}/${file}`;
  const json = JSON.parse(fs.readFileSync(path, 'utf8'));
  drop(json);
  fs.writeFileSync(path, JSON.stringify(json, null, 2) + '\n');
}
