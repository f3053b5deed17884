#!/bin/bash
cd /app
echo 42 > answer.txt
echo "done" > note.txt
