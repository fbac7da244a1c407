#!/bin/bash
echo started
sleep 120
