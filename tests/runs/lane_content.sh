# What a person's lane really holds, beyond what git keeps: run in a fresh lane.
set -e
git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m "kept only by the reflog"
git reset -q --soft HEAD~1
printf '*.log\n.env\nbuild/\n' > .gitignore
printf 'SECRET=1\n' > .env
mkdir -p build/out && printf 'obj' > build/out/a.o
echo log > debug.log
mkdir -p empty/inner
printf 'key' > id_key && chmod 600 id_key
printf 'ro' > ro.txt && chmod 444 ro.txt
mkdir -p private && chmod 700 private
ln -s README.md link-to-readme
ln -s /nonexistent dangling
git init -q nested
(cd nested && echo n > n.txt && git add n.txt && git -c user.email=a@b -c user.name=n commit -qm nested && echo dirty >> n.txt)
echo ita > ita.txt && git add -N ita.txt
echo staged > staged.txt && git add staged.txt && echo unstaged >> staged.txt
git rm -q README.md
printf '* text=auto eol=lf\n' > .gitattributes
printf 'a\r\nb\r\n' > crlf.txt
mkdir -p .git/info && echo '*' >> .git/info/exclude
